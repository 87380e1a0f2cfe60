"""What a consumer hands out of a Fetch answer at its isolation level
(core.isolation): markers never, aborted transactions' batches not under
read_committed."""

import pytest

from rafka.core.isolation import IsolationLevel, batches_to_skip, parse_isolation_level
from rafka.core.records import ATTR_TRANSACTIONAL, RecordInput, encode_batch, encode_end_txn_marker

pytestmark = pytest.mark.core
RU, RC = IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED


def data(base_offset, producer_id=-1, transactional=True):
    return encode_batch([RecordInput(b"v", None, 0)], base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=0 if producer_id >= 0 else -1, base_sequence=0 if producer_id >= 0 else -1,
                        attributes=ATTR_TRANSACTIONAL if transactional and producer_id >= 0 else 0)


def marker(base_offset, producer_id, commit):
    return encode_end_txn_marker(producer_id=producer_id, producer_epoch=0, coordinator_epoch=0, commit=commit,
                                 timestamp_ms=0, base_offset=base_offset)


# offsets: 0 plain, 1 txn A (pid 7), 2 txn B (pid 8), 3 commit B, 4 abort A, 5 txn A again (pid 7), 6 commit A
LOG = (data(0) + data(1, 7) + data(2, 8) + marker(3, 8, True) + marker(4, 7, False) + data(5, 7)
       + marker(6, 7, True))


@pytest.mark.parametrize("level, aborted, skipped", [
    (RU, [], {3, 4, 6}),                              # markers only
    (RU, [(7, 1)], {3, 4, 6}),                        # read_uncommitted ignores the aborted list
    (RC, [], {3, 4, 6}),                              # nothing aborted: markers only
    (RC, [(7, 1)], {1, 3, 4, 6}),                     # A's first transaction; its next one committed
    (RC, [(7, 1), (8, 2)], {1, 2, 3, 4, 6}),          # B's batch too (its marker is a commit: still skipped)
])
def test_batches_to_skip(level, aborted, skipped):
    assert batches_to_skip(LOG, isolation_level=level, aborted_transactions=aborted) == skipped


def test_batches_to_skip__aborted_transaction_starts_after_this_batch__kept():
    assert batches_to_skip(data(0, 7), isolation_level=RC, aborted_transactions=[(7, 5)]) == frozenset()


@pytest.mark.parametrize("name, level", [("read_uncommitted", RU), ("read_committed", RC), ("READ_COMMITTED", RC)])
def test_parse_isolation_level(name, level):
    assert parse_isolation_level(name) is level


def test_parse_isolation_level__unknown__value_error():
    with pytest.raises(ValueError, match="read_committed"):
        parse_isolation_level("serializable")
