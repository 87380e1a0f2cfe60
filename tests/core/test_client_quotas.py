"""core.client_quotas against Kafka's rules: which quota applies to a client
(DefaultQuotaCallback's eight levels, by table), AlterClientQuotas' validation
and errors (ClientQuotaControlManager), DescribeClientQuotas' filters
(ClientQuotasImage.describe), the rate and throttle time (Rate, QuotaUtils) on a
fake clock, and the configs replayed into the metadata and every image."""

import pytest

from rafka.core.client_quotas import (CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, IP, MATCH_DEFAULT,
                                      MATCH_EXACT, MATCH_SPECIFIED, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, USER,
                                      ClientQuotaManager, ClientQuotas, ControllerMutationQuotaManager, SampledRate,
                                      alteration_records, describe)
from rafka.core.clock import FakeClock
from rafka.core.cluster_image import broker_view, build_image
from rafka.core.errors import InvalidRequest, ThrottlingQuotaExceeded, UnknownServerError, UnsupportedVersion
from rafka.core.metadata import ClusterMetadata

pytestmark = pytest.mark.core


def quotas(*entries) -> ClientQuotas:
    """entries: (pairs, value) of producer_byte_rate."""
    return ClientQuotas({frozenset(pairs): {PRODUCER_BYTE_RATE: float(v)} for pairs, v in entries})


U, UD = (USER, "alice"), (USER, None)
C, CD = (CLIENT_ID, "app"), (CLIENT_ID, None)
EVERY_LEVEL = [((U, C), 1), ((U, CD), 2), ((U,), 3), ((UD, C), 4), ((UD, CD), 5), ((UD,), 6), ((C,), 7), ((CD,), 8)]


@pytest.mark.parametrize("removed, limit", [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, None)])
def test_precedence__most_specific_level_wins__kafka_order(removed, limit):
    """Kafka's order: user+client, user+<default client>, user, <default user>+client,
    <default user>+<default client>, <default user>, client, <default client>."""
    configured = quotas(*EVERY_LEVEL[removed:])
    _, found = configured.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    assert found == limit


def test_precedence__user_quota_shared_by_its_clients__client_quota_by_each_user():
    configured = quotas(((U,), 100), ((CD,), 50))
    tags_a, limit_a = configured.resolve(PRODUCER_BYTE_RATE, "alice", "app")
    tags_b, limit_b = configured.resolve(PRODUCER_BYTE_RATE, "alice", "other")
    assert (tags_a, limit_a) == (("alice", ""), 100) and tags_a == tags_b and limit_b == 100
    tags_bob, limit_bob = configured.resolve(PRODUCER_BYTE_RATE, "bob", "app")
    assert (tags_bob, limit_bob) == (("", "app"), 50)
    assert configured.resolve(CONSUMER_BYTE_RATE, "alice", "app")[1] is None
    assert not configured.enabled(CONSUMER_BYTE_RATE) and configured.enabled(PRODUCER_BYTE_RATE)


def test_precedence__only_client_quotas__every_user_shares_the_client_sensor():
    configured = quotas(((C,), 10))
    assert configured.resolve(PRODUCER_BYTE_RATE, "alice", "app") == (("", "app"), 10)
    assert configured.resolve(PRODUCER_BYTE_RATE, "bob", "app") == (("", "app"), 10)
    assert configured.resolve(PRODUCER_BYTE_RATE, "bob", "x")[1] is None


def alter(current, *entries):
    return alteration_records(current, list(entries))


@pytest.mark.parametrize("pairs, ops, error, message", [
    ([], [(PRODUCER_BYTE_RATE, 1.0)], InvalidRequest, "Invalid empty client quota entity"),
    ([(USER, "a"), (USER, "b")], [(PRODUCER_BYTE_RATE, 1.0)], InvalidRequest,
     "Invalid client quota entity, duplicate entity entry user"),
    ([("group", "g")], [(PRODUCER_BYTE_RATE, 1.0)], InvalidRequest, "Unhandled client quota entity type: group"),
    ([(USER, "")], [(PRODUCER_BYTE_RATE, 1.0)], InvalidRequest, "Empty user not supported"),
    ([(USER, "a")], [("bytes_rate", 1.0)], InvalidRequest, "Invalid configuration key bytes_rate"),
    ([(USER, "a")], [(PRODUCER_BYTE_RATE, 0.0)], InvalidRequest, "Quota producer_byte_rate must be greater than 0"),
    ([(USER, "a")], [(PRODUCER_BYTE_RATE, -5.0)], InvalidRequest, "Quota producer_byte_rate must be greater than 0"),
    ([(USER, "a")], [(PRODUCER_BYTE_RATE, 1.5)], InvalidRequest, "producer_byte_rate cannot be a fractional value."),
    ([(USER, "a")], [(PRODUCER_BYTE_RATE, 1e19)], InvalidRequest,
     "Proposed value for producer_byte_rate is too large for a LONG."),
    ([(USER, "a")], [(PRODUCER_BYTE_RATE, 1.0), (PRODUCER_BYTE_RATE, 2.0)], InvalidRequest,
     "Duplicate quota key producer_byte_rate not updating quota for this entity "
     "ClientQuotaEntity(entries={user=a})"),
    ([(IP, "10.0.0.1"), (USER, "a")], [("connection_creation_rate", 1.0)], InvalidRequest,
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([(IP, "not an ip")], [("connection_creation_rate", 1.0)], InvalidRequest,
     "not an ip is not a valid IP or resolvable host."),
    ([(IP, "10.0.0.1")], [(PRODUCER_BYTE_RATE, 1.0)], InvalidRequest, "Invalid configuration key producer_byte_rate"),
    ([(USER, "a")], [("SCRAM-SHA-256", 1.0)], UnknownServerError,
     "Unexpected config type STRING should be Long or Double"),
])
def test_alter__bad_entity_or_op__kafka_error_and_no_record(pairs, ops, error, message):
    records, (result,) = alter(ClientQuotas(), (pairs, ops))
    assert records == []
    assert type(result) is error and result.message == message


def test_alter__each_entry_on_its_own__duplicate_entity_refused__unchanged_value_writes_nothing():
    current = quotas(((U,), 100))
    records, results = alter(current, ([U], [(PRODUCER_BYTE_RATE, 100.0), (REQUEST_PERCENTAGE, 12.5)]),
                             ([(USER, "bob")], [(PRODUCER_BYTE_RATE, 0.5)]),
                             ([U], [(CONSUMER_BYTE_RATE, 10.0)]),
                             ([C, UD], [(CONSUMER_BYTE_RATE, 7.0), (PRODUCER_BYTE_RATE, None)]))
    assert [r is None for r in results] == [True, False, False, True]
    assert results[2].message == "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})"
    assert records == [
        {"type": "client_quota", "entity": [["user", "alice"]], "key": REQUEST_PERCENTAGE, "value": 12.5},
        {"type": "client_quota", "entity": [["client-id", "app"], ["user", None]], "key": CONSUMER_BYTE_RATE,
         "value": 7.0}]   # removing a key the entity does not hold writes nothing


def test_replay__set_then_remove__entity_gone__image_carries_quotas():
    metadata = ClusterMetadata()
    for ops in ([(PRODUCER_BYTE_RATE, 1024.0), (CONSUMER_BYTE_RATE, 2048.0)], [(PRODUCER_BYTE_RATE, None)]):
        records, (error,) = metadata.handle_alter_client_quotas([([(USER, "alice")], ops)])
        assert error is None
        for record in records:
            metadata.replay(record)
    image = broker_view(build_image(metadata, version=3))
    assert dict(image.client_quotas.by_entity) == {frozenset({U}): {CONSUMER_BYTE_RATE: 2048.0}}
    assert image.client_quotas.version == 3 and metadata.client_quota_version == 3
    records, _ = metadata.handle_alter_client_quotas([([(USER, "alice")], [(CONSUMER_BYTE_RATE, None)])])
    for record in records:
        metadata.replay(record)
    assert metadata.client_quotas().by_entity == {}


DESCRIBED = ClientQuotas({frozenset({U}): {PRODUCER_BYTE_RATE: 1.0}, frozenset({UD}): {PRODUCER_BYTE_RATE: 2.0},
                          frozenset({U, C}): {PRODUCER_BYTE_RATE: 3.0}, frozenset({CD}): {CONSUMER_BYTE_RATE: 4.0},
                          frozenset({(IP, "10.0.0.1")}): {"connection_creation_rate": 5.0}})


@pytest.mark.parametrize("components, strict, wanted", [
    ([(USER, MATCH_EXACT, "alice")], False, [{U}, {U, C}]),
    ([(USER, MATCH_EXACT, "alice")], True, [{U}]),
    ([(USER, MATCH_DEFAULT, None)], False, [{UD}]),
    ([(USER, MATCH_SPECIFIED, None)], True, [{U}, {UD}]),   # the default too (Kafka's image: containsKey)
    ([(USER, MATCH_SPECIFIED, None), (CLIENT_ID, MATCH_SPECIFIED, None)], False, [{U, C}]),
    ([(CLIENT_ID, MATCH_DEFAULT, None)], True, [{CD}]),
    ([], False, [{(CLIENT_ID, None)}, {(IP, "10.0.0.1")}, {U}, {U, C}, {UD}]),
    ([], True, []),
])
def test_describe__filters_as_kafka(components, strict, wanted):
    found = describe(DESCRIBED, components, strict=strict)
    assert {e for e, _ in found} == {frozenset(w) for w in wanted} and len(found) == len(wanted)


@pytest.mark.parametrize("components, error, message", [
    ([("", MATCH_EXACT, "a")], InvalidRequest, "Invalid empty entity type."),
    ([(USER, MATCH_EXACT, "a"), (USER, MATCH_DEFAULT, None)], InvalidRequest,
     "Entity type user cannot appear more than once in the filter."),
    ([("topic", MATCH_EXACT, "a")], UnsupportedVersion, "Unsupported entity type topic"),
    ([(USER, MATCH_EXACT, None)], InvalidRequest, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(USER, MATCH_DEFAULT, "a")], InvalidRequest,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([(USER, MATCH_SPECIFIED, "a")], InvalidRequest,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([(USER, 7, None)], InvalidRequest, "Unknown match type 7"),
    ([(IP, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], InvalidRequest,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
])
def test_describe__bad_filter__kafka_error(components, error, message):
    with pytest.raises(error) as raised:
        describe(DESCRIBED, components, strict=False)
    assert raised.value.message == message


def test_rate__fewer_samples_than_the_window__counted_as_window_num_minus_one_windows():
    rate = SampledRate(window_num=11, window_ms=1000, now_ms=0)
    rate.record(5000.0, 0)
    assert rate.window_size_ms(0) == 10_000 and rate.rate_per_s(0) == 500.0
    rate.record(5000.0, 10_500)   # a new sample; the first one still within 11 windows
    assert rate.window_size_ms(10_500) == 10_500 and rate.rate_per_s(10_500) == pytest.approx(10_000 / 10.5)
    assert rate.rate_per_s(21_000) == pytest.approx(5000 / 10.5)   # the first sample expired
    assert rate.rate_per_s(21_500) == 0.0   # and the second


def test_throttle__kafka_formula__over_quota_by_a_tenth__a_tenth_of_the_window():
    """QuotaUtils.throttleTime: (observed - limit) / limit * window."""
    clock = FakeClock(now_ms=0)
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    configured = quotas(((U,), 1000))
    assert manager.record_and_get_throttle_time_ms(configured, "alice", "app", 10_000, clock.now_ms()) == 0
    # 11000 bytes over a 10 s window: 1100/s, 10% over 1000/s -> 10% of 10 s
    assert manager.record_and_get_throttle_time_ms(configured, "alice", "app", 1_000, clock.now_ms()) == 1_000
    clock.advance(2_000)   # 11000 over 10 s still (fewer than 10 full windows): throttled again
    assert manager.record_and_get_throttle_time_ms(configured, "alice", "other", 0, clock.now_ms()) == 1_000
    assert manager.record_and_get_throttle_time_ms(configured, "bob", "app", 50_000, clock.now_ms()) == 0
    assert manager.sensor_count == 2 and manager.max_value_in_quota_window(configured, "alice", "x") == 10_000


def test_throttle__unrecord_takes_back__a_fetch_answered_empty():
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE, quota_window_num=2)
    configured = ClientQuotas({frozenset({CD}): {CONSUMER_BYTE_RATE: 100.0}})
    assert manager.record_and_get_throttle_time_ms(configured, "u", "c", 300, 0) == 2_000   # 300/s over 1 s
    manager.unrecord(configured, "u", "c", 300, 0)
    assert manager.record_and_get_throttle_time_ms(configured, "u", "c", 100, 0) == 0


def test_sensors__bounded__least_recently_used_goes():
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, max_sensors=3)
    configured = ClientQuotas({frozenset({CD}): {PRODUCER_BYTE_RATE: 100.0}})
    for n in range(10):
        manager.record_and_get_throttle_time_ms(configured, "u", f"client-{n}", 1, n)
    assert manager.sensor_count == 3


def test_bounded_sensors__least_recently_used_goes_past_the_bound__an_hour_unused_is_made_anew():
    from rafka.core.client_quotas import INACTIVE_SENSOR_EXPIRATION_MS, BoundedSensors
    made = []
    sensors = BoundedSensors(lambda now_ms: made.append(now_ms) or len(made), max_sensors=2)
    assert (sensors.get("a", 0), sensors.get("b", 1), sensors.get("a", 2)) == (1, 2, 1)   # "a" used last
    assert sensors.get("c", 3) == 3 and len(sensors) == 2
    assert sensors.get("a", 4) == 1 and sensors.get("b", 5) == 4   # "b" went, made anew
    hour_later_ms = 5 + INACTIVE_SENSOR_EXPIRATION_MS
    sensors.get("b", hour_later_ms - 1)
    assert sensors.get("d", hour_later_ms) == 5 and len(sensors) == 2   # "a" unused for an hour went, not "b"
    assert sensors.get("b", hour_later_ms) == 4
    assert sensors.get("b", 2 * hour_later_ms) == 6   # unused for an hour, nothing else asked for: made anew


def test_no_quota_anywhere__nothing_measured():
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    assert manager.record_and_get_throttle_time_ms(ClientQuotas(), "u", "c", 10 ** 12, 0) == 0
    assert manager.sensor_count == 0 and manager.max_value_in_quota_window(ClientQuotas(), "u", "c") is None


@pytest.mark.parametrize("request_bytes", [16_384, 65_536])
def test_greedy_client__kafka_default_window__held_to_its_quota_over_whole_cycles(request_bytes):
    """A client that sends again as soon as its throttle time has passed (5 ms a
    round trip), on a fake clock, under Kafka's default window (11 samples of
    1 s): the first request's allowance (10 windows' worth) comes at once, so
    the rate is Kafka's over whole 11-second cycles: 33 s at the quota within 10%."""
    clock = FakeClock(now_ms=0)
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    configured = ClientQuotas({frozenset({CD}): {PRODUCER_BYTE_RATE: float(1 << 20)}})
    sent = 0
    while clock.now_ms() < 33_000:
        throttle_ms = manager.record_and_get_throttle_time_ms(configured, "u", "c", request_bytes, clock.now_ms())
        sent += request_bytes
        clock.advance(5 + throttle_ms)
    assert abs(sent / 33 / (1 << 20) - 1) <= 0.10


# --- controller_mutation_rate (KIP-599): Kafka's token bucket ---------------------------

def mutation_quotas(rate=2.0, **window):
    clock = FakeClock()
    quotas = ClientQuotas(by_entity={frozenset({(CLIENT_ID, "admin")}): {CONTROLLER_MUTATION_RATE: rate}})
    return clock, quotas, ControllerMutationQuotaManager(clock.monotonic_ms, **window)


def test_mutation_quota_strict__full_bucket_of_ten_windows__one_mutation_may_overdraw__then_refused_until_refilled():
    clock, quotas, manager = mutation_quotas(rate=2.0)          # burst: (11 - 1) samples * 1 s * 2/s = 20
    quota = manager.quota_for(quotas, "", "admin", strict=True)
    quota.record(15)
    quota.record(10)                                              # 5 left: taken, the bucket at -5
    assert quota.throttle_time_ms == 0
    with pytest.raises(ThrottlingQuotaExceeded) as refused:
        quota.record(1)
    assert refused.value.retriable and quota.throttle_time_ms == 2_500   # -(-5) / 2 per s
    clock.advance(1_000)
    assert quota.throttle_time_ms == 1_500                        # less what passed since
    clock.advance(2_500)                                          # refilled to +2
    manager.quota_for(quotas, "", "admin", strict=True).record(1)
    with pytest.raises(ThrottlingQuotaExceeded):                  # the same client's bucket, below zero again
        next_request = manager.quota_for(quotas, "", "admin", strict=True)
        next_request.record(5)
        next_request.record(1)


def test_mutation_quota_permissive__takes_every_mutation__throttle_time_to_refill_to_zero():
    clock, quotas, manager = mutation_quotas(rate=2.0)
    quota = manager.quota_for(quotas, "", "admin", strict=False)
    quota.record(25)
    assert quota.throttle_time_ms == 2_500
    quota.record(5)
    assert quota.throttle_time_ms == 5_000


def test_mutation_quota__refund_gives_back__other_clients_and_no_quota_unbounded():
    clock, quotas, manager = mutation_quotas(rate=1.0, quota_window_num=3)   # burst 2
    quota = manager.quota_for(quotas, "", "admin", strict=True)
    quota.record(3)
    quota.refund(3)
    quota.record(2)                                               # the bucket was full again
    other = manager.quota_for(quotas, "", "someone-else", strict=True)
    for _ in range(3):
        other.record(1_000)
    assert other.throttle_time_ms == 0
    assert manager.quota_for(ClientQuotas(), "", "admin", strict=True).throttle_time_ms == 0


# --- connection_creation_rate (KIP-612): per client IP ---------------------------------

def test_ip_connection_rate__the_ips_own_else_the_default__over_it_refused_and_not_counted():
    from rafka.core.client_quotas import IP_CONNECTION_RATE, IpConnectionRateManager
    quotas = ClientQuotas(by_entity={frozenset({(IP, "10.0.0.7")}): {IP_CONNECTION_RATE: 5.0},
                                     frozenset({(IP, None)}): {IP_CONNECTION_RATE: 100.0}})
    assert (quotas.ip_connection_rate("10.0.0.7"), quotas.ip_connection_rate("10.0.0.8")) == (5.0, 100.0)
    assert ClientQuotas().ip_connection_rate("10.0.0.7") is None
    clock, manager = FakeClock(), IpConnectionRateManager()
    taken = [manager.throttle_time_ms(quotas, "10.0.0.7", clock.monotonic_ms()) for _ in range(50)]
    assert taken == [0] * 50                                       # 50 over the 10 s window: 5/s
    assert manager.throttle_time_ms(quotas, "10.0.0.7", clock.monotonic_ms()) == 200   # (5.1 - 5) / 5 * 10 s
    assert manager.throttle_time_ms(quotas, "10.0.0.7", clock.monotonic_ms()) == 200   # the refused one not counted
    assert manager.throttle_time_ms(quotas, "10.0.0.8", clock.monotonic_ms()) == 0     # another IP's own rate
    assert manager.throttle_time_ms(ClientQuotas(), "10.0.0.7", clock.monotonic_ms()) == 0
    slow = ClientQuotas(by_entity={frozenset({(IP, "10.0.0.9")}): {IP_CONNECTION_RATE: 1.0}})
    for _ in range(10):
        manager.throttle_time_ms(slow, "10.0.0.9", clock.monotonic_ms())
    manager.throttle_time_ms(quotas, "10.0.0.9", clock.monotonic_ms())   # ... and 40 more under a laxer quota
    for _ in range(39):
        manager.throttle_time_ms(quotas, "10.0.0.9", clock.monotonic_ms())
    assert manager.throttle_time_ms(slow, "10.0.0.9", clock.monotonic_ms()) == 1_000   # 40 s, bounded by a window
    clock.advance(10_200)                                          # 51 over 10.2 s: 5/s again
    assert manager.throttle_time_ms(quotas, "10.0.0.7", clock.monotonic_ms()) == 0
