import random

import pytest

from rafka.core.partitioner import StickyPartitioner, murmur2, partition_for_key

pytestmark = pytest.mark.core

# Apache Kafka's UtilsTest.testMurmur2 cases: key -> the Java client's signed hash.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize("key, expected", JAVA_MURMUR2.items())
def test_murmur2__equals_the_java_clients_hash(key, expected):
    assert murmur2(key) == expected


def test_partition_for_key__is_kafkas_to_positive_modulo():
    assert partition_for_key(b"foobar", 50) == 16
    for key, hashed in JAVA_MURMUR2.items():
        for partitions in (1, 3, 7, 12, 50):
            assert partition_for_key(key, partitions) == (hashed & 0x7FFFFFFF) % partitions


def test_sticky_partitioner__keeps_a_partition_until_its_batch_closes():
    sticky = StickyPartitioner(random.Random(7))
    first = sticky.partition("orders", 3)
    assert all(sticky.partition("orders", 3) == first for _ in range(10))
    sticky.on_new_batch("orders", 3, first)
    assert sticky.partition("orders", 3) != first
