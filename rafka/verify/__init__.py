"""`rafka verify`: a workload under faults, its history, and the checker's verdict
(DESIGN section 3 is what it checks, and section 5's transactions; issues 13, 28).

    result = rafka.verify.run(cluster, VerifyOptions(duration_s=60))
    print(format_report(result)); result.ok

The run: the topics are created if missing (R = min(3, brokers), min ISR 2); the
workload (rafka.verify.workload) and the fault injector (rafka.verify.faults)
run for `duration_s`; then the faults stop, the cluster heals, the clients stop,
every partition is read from its log start (the transactional topic's also
read_committed), and rafka.core.checker judges the history. Written to
`out_dir`: `history.jsonl` (every event), `report.txt` and `run.png`
(throughput, latency and transactions over time, faults shaded).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from rafka.core.checker import check_all
from rafka.core.history import load_history
from rafka.verify.faults import FAULT_KINDS, FaultInjector
from rafka.verify.picture import draw
from rafka.verify.workload import History, RunClock, Workload, WorkloadOptions, merge_actor_polls

__all__ = ["FAULT_KINDS", "EmbeddedCluster", "VerifyOptions", "VerifyResult", "WorkloadOptions", "format_report", "run"]


@dataclasses.dataclass
class VerifyOptions:
    duration_s: float = 60.0
    workload: WorkloadOptions = dataclasses.field(default_factory=WorkloadOptions)
    faults: tuple[str, ...] = FAULT_KINDS
    fault_gap_s: tuple[float, float] = (0.5, 2.0)   # between the cluster healing and the next fault
    process_fault_gap_s: tuple[float, float] = (2.0, 6.0)   # between two process faults
    out_dir: str = "verify-out"
    seed: int = 0


@dataclasses.dataclass
class VerifyResult:
    history_path: str
    duration_s: float
    anomalies: dict[str, list]
    faults_by_kind: dict[str, int]
    events_by_type: dict[str, int]
    errors: list[str]
    cluster: object = None    # the cluster the run ended on

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())


def fresh_run_dir(out_dir: Path) -> tuple[str, str]:
    """(history path, member actors' log dir) under `out_dir`, with what an earlier
    run left there removed: the actors' Poll files are merged by name pattern, and
    an earlier run's (other offsets of the same producer-N-i values) were checked
    as this run's: thousands of false duplicates and reads above the HW."""
    actor_log_dir = out_dir / "actors"
    actor_log_dir.mkdir(parents=True, exist_ok=True)
    for stale in actor_log_dir.glob("actor-*.jsonl"):
        stale.unlink()
    history_path = out_dir / "history.jsonl"
    history_path.unlink(missing_ok=True)
    return str(history_path), str(actor_log_dir)


def run(cluster, options: VerifyOptions | None = None, *, reopen=None) -> VerifyResult:
    """`reopen()`: a new cluster on the same data dir (an embedded one), for the
    restart-cluster fault; without it that fault is left out. The cluster the run
    ends on is `result.cluster` (after a restart, not the one passed in)."""
    options = options or VerifyOptions()
    out_dir = Path(options.out_dir)
    history_path, actor_log_dir = fresh_run_dir(out_dir)
    _create_topic(cluster, options.workload)
    clock = RunClock()
    history = History(history_path)
    workload = Workload(cluster, history, clock, options.workload, actor_log_dir=actor_log_dir,
                        seed=options.seed)
    started_s = time.monotonic()
    workload.start()

    def restart_cluster(crash: bool):
        workload.stop()
        workload.cluster.shutdown(clean=not crash)
        restarted = reopen()
        workload.restart_on(restarted)
        injector.member_actors = workload.actor_group.members if workload.actor_group else None
        return restarted

    injector = FaultInjector(cluster, history, clock, kinds=options.faults, topic=options.workload.topic,
                             gap_s=options.fault_gap_s, process_gap_s=options.process_fault_gap_s, seed=options.seed,
                             txn_topic=options.workload.txn_topic,
                             transactional_ids=options.workload.transactional_ids(),
                             member_actors=workload.actor_group.members if workload.actor_group else None,
                             restart_cluster=restart_cluster if reopen is not None else None)
    injector.run_for(options.duration_s)   # in this thread: node restarts need the main thread
    healed = injector.heal()
    workload.stop()
    errors = injector.errors + workload.errors + ([] if healed else ["the cluster had not healed at the end"])
    workload.final_read()
    merge_actor_polls(actor_log_dir, history)
    history.close()
    events = load_history(history_path)
    anomalies = check_all(events, idempotent=options.workload.idempotence)
    result = VerifyResult(history_path, time.monotonic() - started_s, anomalies, dict(injector.done_by_kind),
                          dict(history.counts), errors, workload.cluster)
    (out_dir / "report.txt").write_text(format_report(result) + "\n")
    counts = history.counts
    txns = (f"{counts.get('txn:committed', 0)} transactions committed, "
            f"{counts.get('txn:aborted', 0) + counts.get('txn:failed', 0)} aborted, "
            if options.workload.transactions else "")
    draw(events, str(out_dir / "run.png"), title=f"rafka verify: {sum(result.faults_by_kind.values())} faults, "
         f"{counts.get('send:ok', 0)} acked sends, {txns}{'no anomaly' if result.ok else 'ANOMALIES'}")
    return result


class EmbeddedCluster:
    """The embedded cluster `rafka verify` runs on: 3 brokers on a temporary data dir
    (removed at the end), failure detection in seconds, brokers replaced after 5 s;
    `reopen()` restarts it on the same disks (the restart-cluster fault), and
    leaving the block stops whichever cluster is current.

        with EmbeddedCluster() as embedded:
            result = run(embedded.cluster, options, reopen=embedded.reopen)
    """

    OPTIONS = dict(replica_lag_time_max_ms=2_000, fetch_max_wait_ms=100, leader_ping_timeout_ms=1_000,
                   watch_interval_ms=100, broker_replacement_timeout_ms=5_000,
                   coordinator_options={"offsets_commit_timeout_ms": 5_000,
                                        "group_initial_rebalance_delay_ms": 500,
                                        "group_min_session_timeout_ms": 1_000})

    def __init__(self, nodes: int = 3) -> None:
        import tempfile
        self.nodes = nodes
        self.data_dir = tempfile.mkdtemp(prefix="rafka-verify-")
        self.cluster = None

    def reopen(self):
        import rafka
        self.cluster = rafka.local_cluster(nodes=self.nodes, data_dir=self.data_dir, **self.OPTIONS)
        return self.cluster

    def __enter__(self) -> EmbeddedCluster:
        self.reopen()
        return self

    def __exit__(self, *exc) -> None:
        import shutil
        try:
            if self.cluster is not None:
                self.cluster.shutdown(clean=False)   # its data dir goes next: nothing to close cleanly
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _create_topic(cluster, workload: WorkloadOptions) -> None:
    """The workload's topic, and its transactional topic, if missing."""
    import ray
    admin = cluster.admin()
    existing = admin.list_topics()
    for topic in (workload.topic, workload.txn_topic, workload.ctp_topic):
        if topic is None or topic in existing:
            continue
        brokers = len(ray.get(cluster.controller.list_brokers.remote()))
        replication_factor = min(3, brokers)
        admin.create_topic(topic, partitions=workload.partitions, replication_factor=replication_factor,
                           config={"min.insync.replicas": str(min(2, replication_factor))})


def format_report(result: VerifyResult) -> str:
    """The run as a table: faults by kind, sends by outcome, records polled, and
    each anomaly's count with its first examples."""
    events = result.events_by_type
    lines = [f"rafka verify: {result.duration_s:.0f} s, history {result.history_path}", "",
             f"{'FAULT':<20}{'COUNT':>7}"]
    lines += [f"{kind:<20}{count:>7}" for kind, count in sorted(result.faults_by_kind.items())]
    lines += [f"{'total':<20}{sum(result.faults_by_kind.values()):>7}", "",
              f"sends ok {events.get('send:ok', 0)}, failed {events.get('send:failed', 0)}, "
              f"indeterminate {events.get('send:indeterminate', 0)}; records polled {events.get('poll', 0)}; "
              f"commits {events.get('commit', 0)}"]
    if any(key.startswith("txn:") for key in events):
        lines += [f"transactions committed {events.get('txn:committed', 0)}, aborted on purpose "
                  f"{events.get('txn:aborted', 0)}, commit failed (aborted) {events.get('txn:failed', 0)}, "
                  f"indeterminate {events.get('txn:indeterminate', 0)}; records polled read_committed "
                  f"{events.get('poll:read_committed', 0)}"]
    lines += ["", f"{'ANOMALY':<24}{'COUNT':>7}  FIRST EXAMPLES"]
    for name, found in sorted(result.anomalies.items()):
        examples = "; ".join(getattr(a, "description", str(a)) for a in found[:3])
        lines.append(f"{name:<24}{len(found):>7}  {examples}")
    if result.errors:
        lines += ["", "workload and injector notes (not anomalies):"] + [f"  {e}" for e in result.errors[:20]]
    lines += ["", "verdict: " + ("no anomaly" if result.ok else "ANOMALIES FOUND")]
    return "\n".join(lines)
