"""The verify checker's transaction rules (rafka.core.checker, issue 28): each
anomaly gets a crafted history holding exactly it, and its check must catch it
with the right evidence; a clean transactional history (a commit, a deliberate
abort, a commit that failed definitely, an indeterminate commit that landed and
one that did not, read_committed readers, a reader restarted) passes every check.
"""

import pytest

from rafka.core import checker
from rafka.core.checker import (ANOMALY_NAMES, check_aborted_read, check_all, check_read_past_lso,
                                check_torn_read, check_torn_transaction, check_txn_duplicate,
                                check_txn_lost_write)
from rafka.core.history import FinalRead, InvalidHistory, Poll, Resume, Txn, event_from_json

pytestmark = pytest.mark.core

T = "txn"


def txn(name, writes, *, intent="commit", outcome="ok", start_ms=10, end_requested_ms=20, end_ms=30, **extra):
    """Transaction `name`: `writes` are {partition: [values]}."""
    return Txn("p1", "tid-1", intent, outcome, [(T, p, v) for p, vs in writes.items() for v in vs],
               start_ms, end_requested_ms, end_ms, **extra)


def rc_poll(offset, value, *, partition=0, consumer="r1", incarnation=1, time_ms=100, group=None, generation=None):
    return Poll(consumer, incarnation, group, generation, T, partition, offset, value, time_ms, "read_committed")


def final(partition, records, *, end, isolation_level):
    return FinalRead(T, partition, sorted(records.items()), 0, end, 1_000, isolation_level)


def finals(uncommitted, committed):
    """The read_uncommitted and read_committed final reads of each partition:
    {partition: {offset: value}}, the end offset past the last (markers included)."""
    events = []
    for p, records in uncommitted.items():
        end = max(records, default=-1) + 2
        events.append(final(p, records, end=end, isolation_level="read_uncommitted"))
        events.append(final(p, committed.get(p, {}), end=end, isolation_level="read_committed"))
    return events


# Offsets: c0 (committed) at 0 and 1 with its marker at 2; a0 (aborted) at 3, marker 4;
# i0 (indeterminate, landed) at 5, marker 6; on partition 1: c1 at 0, a1 at 2, i1 at 4.
COMMITTED = txn("c", {0: ["c0", "c0b"], 1: ["c1"]})
ABORTED = txn("a", {0: ["a0"], 1: ["a1"]}, intent="abort", start_ms=40, end_requested_ms=50, end_ms=60)
FAILED = txn("f", {1: ["f1"]}, outcome="failed", start_ms=61, end_requested_ms=62, end_ms=63,
             error="NotEnoughReplicas")
LANDED = txn("i", {0: ["i0"], 1: ["i1"]}, outcome="indeterminate", start_ms=70, end_requested_ms=80, end_ms=200,
             error="RequestTimedOut")
NEVER = txn("n", {0: ["n0"]}, outcome="indeterminate", start_ms=210, end_requested_ms=220, end_ms=400,
            error="ProducerFenced")
UNCOMMITTED = {0: {0: "c0", 1: "c0b", 3: "a0", 5: "i0", 7: "n0"}, 1: {0: "c1", 2: "a1", 4: "i1", 5: "f1"}}
VISIBLE = {0: {0: "c0", 1: "c0b", 5: "i0"}, 1: {0: "c1", 4: "i1"}}


def clean_history():
    return [COMMITTED, ABORTED, FAILED, LANDED, NEVER,
            rc_poll(0, "c0", time_ms=100), rc_poll(1, "c0b", time_ms=100), rc_poll(0, "c1", partition=1, time_ms=100),
            rc_poll(5, "i0", time_ms=250), rc_poll(4, "i1", partition=1, time_ms=250),
            # restarted, it reads from the start again: a new incarnation, a new stretch
            rc_poll(0, "c0", incarnation=2, time_ms=300), rc_poll(1, "c0b", incarnation=2, time_ms=300),
            rc_poll(5, "i0", incarnation=2, time_ms=300),
            *finals(UNCOMMITTED, VISIBLE)]


def test_clean_transactional_history__commits_aborts_indeterminate_both_ways__passes_every_check():
    assert check_all(clean_history(), idempotent=True) == {name: [] for name in ANOMALY_NAMES}


def test_txn__fate__from_intent_and_outcome():
    assert [t.fate for t in (COMMITTED, ABORTED, FAILED, LANDED, NEVER)] == [
        "committed", "aborted", "aborted", "indeterminate", "indeterminate"]


def test_txn__to_json_and_back__round_trips():
    event = txn("x", {0: ["x0"], 2: ["x2"]}, offsets=[("g", "in", 0, 5)], sources=["in-0", "in-1"])
    assert event_from_json(event.to_json()) == event


@pytest.mark.parametrize("make, message", [
    (lambda: txn("x", {0: ["x", "x"]}), "a value is written twice"),
    (lambda: txn("x", {0: ["x"]}, intent="maybe"), "intent must be commit or abort"),
    (lambda: txn("x", {0: ["x"]}, end_requested_ms=5), "start_ms <= end_requested_ms <= end_ms"),
    (lambda: txn("x", {0: ["x"]}, sources=["a", "b"]), "sources are not one per write"),
    (lambda: Poll("c", 1, None, None, T, 0, 0, "x", 5, "read_dirty"), "isolation_level must be one of"),
])
def test_txn__breaking_an_invariant__refused(make, message):
    with pytest.raises(InvalidHistory, match=message):
        make()


def test_aborted_read__read_committed_poll_of_an_aborted_transactions_value__caught():
    dirty = rc_poll(3, "a0", time_ms=100)
    history = [*clean_history(), dirty,
               # read_uncommitted readers see aborted records legitimately
               Poll("u", 1, None, None, T, 0, 3, "a0", 100)]
    [anomaly] = check_aborted_read(history)
    assert anomaly.name == "aborted-read" and anomaly.evidence == (ABORTED, dirty)


def test_aborted_read__a_failed_commits_value_in_the_read_committed_final_read__caught():
    visible = {0: VISIBLE[0], 1: {**VISIBLE[1], 5: "f1"}}
    [anomaly] = check_aborted_read([COMMITTED, ABORTED, FAILED, LANDED, NEVER, *finals(UNCOMMITTED, visible)])
    assert anomaly.evidence[0] == FAILED and anomaly.evidence[1]["final_read"]["offset"] == 5


def test_aborted_read__an_indeterminate_transaction_seen_then_gone__caught():
    seen = rc_poll(7, "n0", time_ms=300)
    [anomaly] = check_aborted_read([*clean_history(), seen])
    assert anomaly.evidence == (NEVER, seen)


def test_txn_lost_write__a_committed_value_missing_from_the_read_committed_final_read__caught():
    visible = {0: {1: "c0b", 5: "i0"}, 1: VISIBLE[1]}
    [anomaly] = check_txn_lost_write([COMMITTED, ABORTED, LANDED, *finals(UNCOMMITTED, visible)])
    assert anomaly.name == "txn-lost-write"
    assert anomaly.evidence == (COMMITTED, {"missing": [[T, 0, "c0"]]})


def test_txn_lost_write__a_final_read_not_from_offset_0__not_judged():
    history = [COMMITTED, FinalRead(T, 0, [(5, "x")], 4, 6, 1_000, "read_committed"),
               FinalRead(T, 1, [(0, "c1")], 0, 1, 1_000, "read_committed")]
    assert check_txn_lost_write(history) == []


def test_txn_duplicate__a_committed_value_twice_in_the_read_committed_final_read__caught():
    uncommitted = {0: {**UNCOMMITTED[0], 8: "c0"}, 1: UNCOMMITTED[1]}
    visible = {0: {**VISIBLE[0], 8: "c0"}, 1: VISIBLE[1]}
    [anomaly] = check_txn_duplicate([COMMITTED, LANDED, *finals(uncommitted, visible)])
    assert anomaly.name == "txn-duplicate" and anomaly.evidence[0] == COMMITTED
    assert [e["final_read"]["offset"] for e in anomaly.evidence[1:]] == [0, 8]


def test_torn_transaction__an_indeterminate_commit_visible_on_one_partition_only__caught():
    visible = {0: VISIBLE[0], 1: {0: "c1"}}
    [anomaly] = check_torn_transaction([COMMITTED, LANDED, *finals(UNCOMMITTED, visible)])
    assert anomaly.name == "torn-transaction"
    assert anomaly.evidence == (LANDED, {"seen": [[T, 0, "i0"]], "missing": [[T, 1, "i1"]]})


def test_torn_read__reader_past_a_committed_transaction_without_all_of_it__caught():
    history = [COMMITTED, LANDED, rc_poll(0, "c0"), rc_poll(5, "i0"), *finals(UNCOMMITTED, VISIBLE)]
    [anomaly] = check_torn_read(history)
    assert anomaly.name == "torn-read"
    assert anomaly.evidence == (COMMITTED, history[2], history[3], {"final_read": {
        "topic": T, "partition": 0, "offset": 1, "value": "c0b", "log_start_offset": 0, "high_watermark": 9}})


def test_torn_read__stretches_split_at_a_resume_and_by_generation__not_torn():
    history = [COMMITTED, LANDED,
               rc_poll(0, "c0", group="g", generation=1),
               Resume("r1", 1, "g", T, 0, 5, 5, 150),
               rc_poll(5, "i0", group="g", generation=1, time_ms=200),
               rc_poll(0, "c0", incarnation=2), rc_poll(5, "i0", incarnation=2, generation=2, group="g"),
               *finals(UNCOMMITTED, VISIBLE)]
    assert check_torn_read(history) == []


def test_read_past_lso__read_committed_poll_before_the_commit_was_asked_for__caught():
    early = rc_poll(0, "c0", time_ms=15)
    [anomaly] = check_read_past_lso([COMMITTED, early])
    assert anomaly.name == "read-past-LSO" and anomaly.evidence == (COMMITTED, early)
    # at the very ms of the request the order is unknown: not judged
    assert check_read_past_lso([COMMITTED, rc_poll(0, "c0", time_ms=20)]) == []


def test_txn_checks__every_rule_is_in_check_all():
    assert {"aborted-read", "txn-lost-write", "txn-duplicate", "torn-transaction", "torn-read",
            "read-past-LSO"} <= set(checker.CHECKS)


# -- consume-transform-produce ------------------------------------------------------------

OUT = "txn-out"


def ctp(number, inputs, *, outcome="ok", intent="commit", start_ms=500):
    """The chain's transaction `number`: `inputs` are (partition, offset, value) of
    the input topic T, each written transformed to OUT; the offsets past them."""
    ends = {}
    for partition, offset, _ in inputs:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return Txn("ctp", "tid-ctp", intent, outcome, [(OUT, p, f"{v}>{number}") for p, _, v in inputs],
               start_ms, start_ms + 5, start_ms + 10, [("chain", T, p, o) for p, o in sorted(ends.items())],
               [v for _, _, v in inputs])


def out_final(records):
    """The chain's output topic, partition 0, read both ways: {offset: value}, all committed."""
    end = max(records, default=-1) + 2
    return [FinalRead(OUT, 0, sorted(records.items()), 0, end, 1_000, level)
            for level in ("read_uncommitted", "read_committed")]


# Input (partition 0, read_committed): c0 at 0, c0b at 1, i0 at 5. The chain read
# c0, c0b in one transaction it aborted, then again in one it committed, then i0.
FIRST, AGAIN, LAST = (ctp(1, [(0, 0, "c0"), (0, 1, "c0b")], intent="abort"),
                      ctp(2, [(0, 0, "c0"), (0, 1, "c0b")], start_ms=600), ctp(3, [(0, 5, "i0")], start_ms=700))


def ctp_history(output, committed_offset):
    from rafka.core.history import CommittedRead
    handed = [rc_poll(o, v, consumer="ctp", group="chain", generation=1, time_ms=450)
              for o, v in VISIBLE[0].items()]
    return [COMMITTED, LANDED, *handed, FIRST, AGAIN, LAST, *finals(UNCOMMITTED, VISIBLE), *out_final(output),
            CommittedRead("chain", T, 0, committed_offset, 1_100)]


def test_ctp__each_input_once_below_the_committed_offset__passes():
    history = ctp_history({1: "c0>2", 2: "c0b>2", 4: "i0>3"}, 6)
    assert {name: found for name, found in check_all(history, idempotent=True).items() if found} == {}


def test_ctp_duplicate__an_input_in_the_committed_output_twice__caught():
    twice = ctp(4, [(0, 5, "i0")], start_ms=800)
    history = [*ctp_history({1: "c0>2", 2: "c0b>2", 4: "i0>3", 6: "i0>4"}, 6), twice]
    [anomaly] = checker.check_ctp_duplicate(history)
    assert anomaly.name == "ctp-duplicate" and anomaly.evidence[0] == LAST and anomaly.evidence[2] == twice
    assert "'i0' is in the committed output 2 times" in anomaly.description


def test_ctp_offsets__input_below_the_committed_offset_without_output__caught():
    [anomaly] = checker.check_ctp_offsets(ctp_history({1: "c0>2", 2: "c0b>2"}, 6))
    assert anomaly.name == "ctp-offsets"
    assert (anomaly.evidence[1]["missing"], anomaly.evidence[1]["extra"]) == (["i0"], [])


def test_ctp_offsets__output_of_input_past_the_committed_offset__caught():
    [anomaly] = checker.check_ctp_offsets(ctp_history({1: "c0>2", 2: "c0b>2", 4: "i0>3"}, 2))
    assert (anomaly.evidence[1]["missing"], anomaly.evidence[1]["extra"]) == ([], ["i0"])


def test_poll_skip__read_committed_group__judged_against_the_read_committed_final_read():
    from rafka.core.history import CommittedRead
    handed = [rc_poll(o, v, consumer="ctp", group="chain", generation=1) for o, v in VISIBLE[0].items()]
    committed = CommittedRead("chain", T, 0, 8, 1_100)
    assert checker.check_poll_skip([*handed, committed, *finals(UNCOMMITTED, VISIBLE)]) == []
    [anomaly] = checker.check_poll_skip([*handed[:-1], committed, *finals(UNCOMMITTED, VISIBLE)])
    assert anomaly.evidence[1]["skipped"]["examples"] == [[5, "i0"]]
