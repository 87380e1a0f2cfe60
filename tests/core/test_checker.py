"""The verify checker (rafka.core.checker) and its history (rafka.core.history).

Each anomaly gets a crafted history holding exactly that anomaly, and its check must
catch it and name the right evidence; one clean history (indeterminate and failed
sends, a rebalance, a restart that resumes at the committed offset, an indeterminate
commit, faults) must pass every check; events must round-trip through JSON lines.
"""

import io

import pytest

from rafka.core import checker
from rafka.core.checker import (ANOMALY_NAMES, check_all, check_commit_regression, check_duplicate,
                                check_inconsistent_offsets, check_lost_write, check_nonmonotonic_poll,
                                check_nonmonotonic_send, check_poll_skip, check_read_above_hw,
                                check_resume_mismatch, index_history)
from rafka.core.history import (Assigned, Commit, CommittedRead, Fault, FinalRead, HistoryWriter, InvalidHistory,
                                Poll, Resume, Send, event_from_json, read_history)

pytestmark = pytest.mark.core

T = "t"


def ok(producer, value, partition, offset, start_ms, end_ms=None):
    return Send(producer, T, value, partition, "ok", offset, start_ms, end_ms if end_ms is not None else start_ms + 5)


def poll(consumer, offset, value, *, partition=0, incarnation=1, group="g", generation=1, time_ms=100):
    return Poll(consumer, incarnation, group, generation, T, partition, offset, value, time_ms)


def commit(consumer, offsets, start_ms, end_ms, *, outcome="ok", incarnation=1, generation=1, sync=True):
    return Commit(consumer, incarnation, "g", generation, {(T, p): o for p, o in offsets.items()}, sync, outcome,
                  start_ms, end_ms)


def resume(consumer, committed_offset, first_position, time_ms, *, partition=0, incarnation=1):
    return Resume(consumer, incarnation, "g", T, partition, committed_offset, first_position, time_ms)


def final(partition, values, *, log_start_offset=0, high_watermark=None, time_ms=1_000):
    """The final read of a partition: `values` is {offset: value} or a list from the log start."""
    records = values.items() if isinstance(values, dict) else enumerate(values, start=log_start_offset)
    records = sorted(records)
    hw = high_watermark if high_watermark is not None else (records[-1][0] + 1 if records else log_start_offset)
    return FinalRead(T, partition, records, log_start_offset, hw, time_ms)


def clean_history():
    """Two partitions, an idempotent producer, a group of two members over three
    generations (a rebalance, then c1 restarting), a tail reader, an observer and
    two faults. Nothing in it is an anomaly."""
    a = ["a0", "a1", "a2", "a3", "a4", "a5"]
    b = ["b0", "b1", "b2"]
    return [
        ok("p1", a[0], 0, 0, 10), ok("p1", b[0], 1, 0, 15), ok("p1", a[1], 0, 1, 20), ok("p1", b[1], 1, 1, 25),
        ok("p1", a[2], 0, 2, 30), ok("p1", b[2], 1, 2, 35), ok("p1", a[3], 0, 3, 40),
        Fault("kill-leader", "replica:t:0:0", 50, 70),
        # A definite error: never written.
        Send("p1", T, "failed-1", 0, "failed", None, 60, 61, "NOT_ENOUGH_REPLICAS"),
        # Timed out, then found written once (at offset 4) ...
        Send("p1", T, a[4], 0, "indeterminate", None, 50, 80, "KafkaTimeoutError"),
        ok("p1", a[5], 0, 5, 90),
        # ... and timed out, never written.
        Send("p1", T, "maybe-never", None, "indeterminate", None, 100, 130, "KafkaTimeoutError"),
        # Generation 1: c1 alone, from the log start.
        Assigned("c1", 1, "g", 1, [(T, 0), (T, 1)], 100),
        resume("c1", None, 0, 101), resume("c1", None, 0, 101, partition=1),
        poll("c1", 0, a[0], time_ms=110), poll("c1", 1, a[1], time_ms=110), poll("c1", 2, a[2], time_ms=110),
        poll("c1", 0, b[0], partition=1, time_ms=110), poll("c1", 1, b[1], partition=1, time_ms=110),
        commit("c1", {0: 3, 1: 2}, 120, 125),
        CommittedRead("g", T, 0, 3, 150), CommittedRead("g", T, 1, 2, 150),
        Fault("pause-leader", "replica:t:1:0", 150, 180),
        # Generation 2: c2 joins; c1 keeps partition 0, c2 takes partition 1.
        Assigned("c1", 1, "g", 2, [(T, 0)], 200), Assigned("c2", 1, "g", 2, [(T, 1)], 200),
        resume("c1", 3, 3, 201), resume("c2", 2, 2, 201, partition=1),
        poll("c1", 3, a[3], generation=2, time_ms=210), poll("c1", 4, a[4], generation=2, time_ms=210),
        poll("c2", 2, b[2], partition=1, generation=2, time_ms=210),
        commit("c1", {0: 5}, 220, 230, generation=2, sync=False),
        commit("c2", {1: 3}, 220, 225, generation=2),
        poll("c1", 5, a[5], generation=2, time_ms=240),
        # c1 dies with this commit in flight: it did not land.
        commit("c1", {0: 6}, 245, 260, generation=2, outcome="indeterminate"),
        CommittedRead("g", T, 0, 5, 250), CommittedRead("g", T, 1, 3, 250),
        # Generation 3: c1 restarted (incarnation 2) resumes at the committed 5 and is
        # handed offset 5 again (a redelivery, allowed).
        Assigned("c1", 2, "g", 3, [(T, 0)], 300), Assigned("c2", 1, "g", 3, [(T, 1)], 300),
        resume("c1", 5, 5, 301, incarnation=2), resume("c2", 3, 3, 301, partition=1),
        poll("c1", 5, a[5], incarnation=2, generation=3, time_ms=310),
        commit("c1", {0: 6}, 320, 325, incarnation=2, generation=3),
        CommittedRead("g", T, 0, 6, 400), CommittedRead("g", T, 1, 3, 400),
        # A tail reader without a group.
        *[poll("tail", o, v, group=None, generation=None, time_ms=400 + o) for o, v in enumerate(a)],
        *[poll("tail", o, v, partition=1, group=None, generation=None, time_ms=400 + o) for o, v in enumerate(b)],
        final(0, a), final(1, b),
    ]


# -- the clean history --------------------------------------------------------------------


def test_clean_history__with_indeterminate_sends_a_rebalance_and_a_restart__passes_every_check():
    history = clean_history()
    assert check_all(history, idempotent=True) == {name: [] for name in ANOMALY_NAMES}
    for name, check in checker.CHECKS.items():
        assert check(history) == [], name


def test_check_all__without_idempotence__does_not_run_the_duplicate_check():
    history = [ok("p1", "x", 0, 0, 10), final(0, ["x", "x"])]
    assert [a.name for a in check_all(history, idempotent=True)["duplicate"]] == ["duplicate"]
    results = check_all(history, idempotent=False)
    assert "duplicate" not in results and set(results) == set(ANOMALY_NAMES) - {"duplicate"}


# -- one test per anomaly -----------------------------------------------------------------


def test_lost_write__acked_send_missing_from_the_final_log__caught():
    kept, lost = ok("p1", "x", 0, 0, 10), ok("p1", "y", 0, 1, 20)
    history = [kept, lost, Send("p1", T, "z", 0, "indeterminate", None, 30, 60, "timeout"), final(0, ["x"])]
    [anomaly] = check_lost_write(history)
    assert anomaly.name == "lost-write"
    assert anomaly.evidence[0] == lost
    assert anomaly.evidence[1]["final_read"] == {"topic": T, "partition": 0, "offset": 1, "value": None,
                                                 "log_start_offset": 0, "high_watermark": 1}
    assert "at or above the final HW 1" in anomaly.description


def test_lost_write__acked_below_the_final_log_start__not_judged_as_retention_may_delete_it():
    history = [ok("p1", "x", 0, 0, 10), ok("p1", "y", 0, 1, 20), final(0, ["y"], log_start_offset=1)]
    assert check_lost_write(history) == []


def test_lost_write__acked_value_found_at_another_offset__caught_with_where_it_is():
    send = ok("p1", "y", 0, 1, 20)
    [anomaly] = check_lost_write([send, final(0, {0: "x", 2: "y"})])
    assert anomaly.evidence[0] == send and anomaly.evidence[2] == {"value_found_at_offsets": [2]}


def test_inconsistent_offsets__two_acks_at_one_offset__caught():
    first, second = ok("p1", "x", 0, 7, 10), ok("p2", "y", 0, 7, 12)
    [anomaly] = check_inconsistent_offsets([first, ok("p1", "z", 0, 8, 20), second])
    assert anomaly.name == "inconsistent-offsets"
    assert anomaly.evidence == (first, second)


def test_inconsistent_offsets__a_poll_disagrees_with_the_final_log__caught():
    seen = poll("c1", 1, "other")
    [anomaly] = check_inconsistent_offsets([ok("p1", "x", 0, 0, 10), seen, final(0, ["x", "y"])])
    assert anomaly.evidence[0]["final_read"]["value"] == "y" and anomaly.evidence[1] == seen


def test_duplicate__one_value_at_two_offsets__caught():
    send, again = ok("p1", "x", 0, 0, 10), poll("c1", 1, "x")
    [anomaly] = check_duplicate([send, ok("p1", "y", 0, 2, 20), poll("c1", 0, "x"), again,
                                 final(0, ["x", "x", "y"])])
    assert anomaly.name == "duplicate"
    assert [e["final_read"]["offset"] for e in anomaly.evidence] == [0, 1]
    assert "t-0 offset 0, t-0 offset 1" in anomaly.description


def test_duplicate__an_indeterminate_send_written_twice__caught():
    history = [Send("p1", T, "x", 0, "indeterminate", None, 10, 40, "timeout"), poll("c1", 3, "x"),
               poll("c1", 4, "x")]
    [anomaly] = check_duplicate(history)
    assert anomaly.evidence == (history[1], history[2])


def test_nonmonotonic_send__later_send_acked_at_a_lower_offset__caught():
    earlier, later = ok("p1", "x", 0, 5, 10, 50), ok("p1", "y", 0, 3, 20, 30)
    history = [ok("p1", "w", 0, 4, 5), later, earlier, ok("p2", "z", 0, 2, 30), ok("p1", "v", 1, 0, 40)]
    [anomaly] = check_nonmonotonic_send(history)
    assert anomaly.name == "nonmonotonic-send"
    assert anomaly.evidence == (earlier, later)


def test_nonmonotonic_send__sends_started_in_the_same_ms__order_unknown_not_judged():
    assert check_nonmonotonic_send([ok("p1", "x", 0, 5, 10), ok("p1", "y", 0, 3, 10)]) == []


def test_nonmonotonic_poll__offset_goes_back_within_a_generation__caught():
    went_back_from, went_back = poll("c1", 3, "d"), poll("c1", 2, "c")
    history = [poll("c1", 0, "a"), went_back_from, went_back,
               # A gap (a hole in the log) and a new generation are not anomalies.
               poll("c1", 0, "a", generation=2), poll("c1", 0, "a", incarnation=2)]
    [anomaly] = check_nonmonotonic_poll(history)
    assert anomaly.name == "nonmonotonic-poll"
    assert anomaly.evidence == (went_back_from, went_back)


def test_nonmonotonic_poll__first_poll_below_the_resumed_position__caught():
    started = resume("c1", 4, 4, 100)
    [anomaly] = check_nonmonotonic_poll([poll("c1", 5, "f"), started, poll("c1", 2, "c", generation=2)])
    assert anomaly.evidence[0] == started and anomaly.evidence[1].offset == 2


def test_poll_skip__offset_below_the_committed_offset_never_handed__caught():
    committed = commit("c1", {0: 4}, 120, 125)
    history = [poll("c1", 0, "a"), poll("c1", 1, "b"), poll("c2", 3, "d", generation=2), committed,
               # A reader outside the group does not count for it.
               poll("tail", 2, "c", group=None, generation=None),
               final(0, ["a", "b", "c", "d", "e"])]
    [anomaly] = check_poll_skip(history)
    assert anomaly.name == "poll-skip"
    assert anomaly.evidence == (committed, {"skipped": {"group": "g", "topic": T, "partition": 0,
                                                        "first_offset": 2, "last_offset": 2, "count": 1,
                                                        "examples": [[2, "c"]]}})


def test_poll_skip__the_last_committed_read_is_the_final_committed_offset__caught():
    observed = CommittedRead("g", T, 0, 3, 500)
    history = [poll("c1", 0, "a"), commit("c1", {0: 1}, 120, 125), observed, final(0, ["a", "b", "c", "d"])]
    [anomaly] = check_poll_skip(history)
    assert anomaly.evidence[0] == observed and anomaly.evidence[1]["skipped"]["count"] == 2


def test_commit_regression__committed_reads_move_back__caught():
    higher, lower = CommittedRead("g", T, 0, 7, 200), CommittedRead("g", T, 0, 4, 300)
    history = [CommittedRead("g", T, 0, 5, 100), lower, higher, CommittedRead("g", T, 1, 1, 250)]
    [anomaly] = check_commit_regression(history)
    assert anomaly.name == "commit-regression"
    assert anomaly.evidence == (higher, lower)


def test_commit_regression__committed_offset_vanishes__caught_and_reads_of_one_ms_are_unordered():
    found, vanished = CommittedRead("g", T, 0, 5, 100), CommittedRead("g", T, 0, None, 200)
    history = [CommittedRead("g", T, 0, 3, 100), found, vanished,
               CommittedRead("g", T, 1, 4, 100), CommittedRead("g", T, 1, 2, 100)]
    [anomaly] = check_commit_regression(history)
    assert anomaly.evidence == (found, vanished)


def test_commit_regression__ok_commit_below_one_acked_before_it_started__caught():
    acked, zombie = commit("c1", {0: 9}, 10, 20), commit("c2", {0: 6}, 30, 40, generation=1)
    # The concurrent commit of 5 (started before 9 was acked) is not ordered after it.
    history = [commit("c1", {0: 5}, 15, 25, sync=False), acked, zombie,
               commit("c2", {0: 2}, 50, 60, outcome="failed")]
    [anomaly] = check_commit_regression(history)
    assert anomaly.evidence == (acked, zombie)


def test_read_above_hw__consumer_handed_a_record_later_truncated__caught():
    truncated = poll("c1", 3, "uncommitted")
    history = [poll("c1", 2, "c"), truncated, final(0, ["a", "b", "c"])]
    [anomaly] = check_read_above_hw(history)
    assert anomaly.name == "read-above-HW"
    assert anomaly.evidence == (truncated, {"final_read": {"topic": T, "partition": 0, "offset": 3, "value": None,
                                                           "log_start_offset": 0, "high_watermark": 3}})


def test_resume_mismatch__member_starts_elsewhere_than_the_committed_offset_it_found__caught():
    elsewhere = resume("c1", 5, 0, 300, incarnation=2)
    [anomaly] = check_resume_mismatch([commit("c1", {0: 5}, 100, 110), elsewhere, final(0, list("abcdef"))])
    assert anomaly.name == "resume-mismatch"
    assert anomaly.evidence == (elsewhere,)


def test_resume_mismatch__committed_offset_found_below_the_last_acked_commit__caught():
    acked = commit("c1", {0: 7}, 100, 110)
    behind = resume("c2", 4, 4, 200)
    history = [commit("c1", {0: 4}, 50, 60), acked,
               # A higher commit still in flight at the resume is neither required nor forbidden.
               commit("c1", {0: 8}, 150, 250, outcome="indeterminate"), behind,
               resume("c3", 8, 8, 300, incarnation=1)]
    [anomaly] = check_resume_mismatch(history)
    assert anomaly.evidence == (behind, acked)


def test_resume_mismatch__committed_offset_deleted_by_retention__reset_to_the_log_start_allowed():
    history = [commit("c1", {0: 2}, 10, 20), resume("c2", 2, 5, 100), final(0, {6: "g"}, log_start_offset=6)]
    assert check_resume_mismatch(history) == []


# -- the history as JSON lines --------------------------------------------------------------


@pytest.mark.parametrize("event", [e for e in clean_history()
                                   if type(e) not in {Poll, Send}] + clean_history()[:2] + [
    Send("p1", T, "v", None, "indeterminate", None, 1, 2, None), poll("c1", 0, "ü", group=None, generation=None)],
    ids=lambda e: type(e).__name__)
def test_event__to_json_and_back__round_trips(event):
    line = event.to_json()
    assert "\n" not in line and event_from_json(line) == event == type(event).from_json(line)
    assert event_from_json(line).time_ms == event.time_ms


def test_history_file__written_and_read__round_trips_and_checks_the_same():
    buffer = io.BytesIO()
    writer = HistoryWriter(buffer)
    for event in clean_history():
        writer.write(event)
    assert list(read_history(io.BytesIO(buffer.getvalue()))) == clean_history()


def test_history_file__a_final_read_over_the_line_limit__is_split_into_chunks_the_checker_joins():
    big = final(0, [f"value-{i:05}" for i in range(2_000)])
    buffer = io.BytesIO()
    HistoryWriter(buffer, line_bytes_max=4_096).write(big)
    lines = buffer.getvalue().splitlines()
    assert len(lines) > 8 and max(len(line) for line in lines) <= 4_096
    events = list(read_history(io.BytesIO(buffer.getvalue()), line_bytes_max=4_096))
    assert all(e.high_watermark == 2_000 for e in events)
    assert index_history(events).final_logs[(T, 0)].values_by_offset == dict(big.records)


def test_history_file__a_line_over_the_limit__refused_without_reading_it_whole():
    line = ok("p1", "x" * 500, 0, 0, 10).to_json().encode()
    with pytest.raises(InvalidHistory, match="line 2: longer than line_bytes_max 256"):
        list(read_history(io.BytesIO(ok("p1", "y", 0, 1, 10).to_json().encode() + b"\n" + line + b"\n"),
                          line_bytes_max=256))
    with pytest.raises(InvalidHistory, match="over line_bytes_max 256"):
        HistoryWriter(io.BytesIO(), line_bytes_max=256).write(ok("p1", "x" * 500, 0, 0, 10))


def test_history_file__a_torn_last_line__refused_naming_it():
    whole = ok("p1", "x", 0, 0, 10).to_json().encode() + b"\n"
    with pytest.raises(InvalidHistory, match=r"line 2 \(the last line, without its newline: torn\?\)"):
        list(read_history(io.BytesIO(whole + whole[:20])))


@pytest.mark.parametrize("make, message", [
    (lambda: Send("p1", T, "x", 0, "ok", None, 1, 2), "offset is required"),
    (lambda: Send("p1", T, "x", 0, "failed", 3, 1, 2), "only an ok send knows its offset"),
    (lambda: Send("p1", T, "x", 0, "acked", 3, 1, 2), "outcome must be one of"),
    (lambda: Commit("c1", 1, "g", 1, {(T, 0): 1}, True, "ok", 5, 4), "start_ms after end_ms"),
    (lambda: FinalRead(T, 0, [(1, "a"), (0, "b")], 0, 2, 9), "out of order"),
    (lambda: FinalRead(T, 0, [(2, "a")], 0, 2, 9), r"outside \[log start, HW\)"),
    (lambda: Poll("c1", 1, "g", 1, T, 0, -1, "x", 5), "offset must be an int >= 0"),
    (lambda: event_from_json('{"type":"send","producer":"p1"}'), "send: "),
    (lambda: event_from_json('{"type":"fault","kind":"k","target":"x","start_ms":1,"end_ms":2,"time_ms":3}'),
     "time_ms 3 is not end_ms"),
    (lambda: event_from_json('{"type":"vote"}'), "unknown event type 'vote'"),
])
def test_event__breaking_an_invariant__refused(make, message):
    with pytest.raises(InvalidHistory, match=message):
        make()


def test_check_all__a_large_clean_history__passes_in_one_index():
    values = [f"v{i}" for i in range(20_000)]
    history = [ok("p1", v, 0, o, o) for o, v in enumerate(values)]
    history += [poll("c1", o, v, time_ms=o) for o, v in enumerate(values)]
    history += [commit("c1", {0: 20_000}, 30_000, 30_001), final(0, values)]
    assert all(found == [] for found in check_all(history, idempotent=True).values())
