"""`rafka verify` end to end: the workload under every fault kind on an embedded
3-broker cluster, then the checker's verdict on the history."""

import pytest

from rafka.core.history import load_history
from rafka.verify import FAULT_KINDS, EmbeddedCluster, VerifyOptions, format_report, run

pytestmark = pytest.mark.verify


def test_verify__every_fault_kind__history_checked_and_no_anomaly(tmp_path):
    with EmbeddedCluster() as embedded:
        result = run(embedded.cluster, VerifyOptions(duration_s=120, out_dir=str(tmp_path), fault_gap_s=(0.2, 0.5)),
                     reopen=embedded.reopen)
    report = format_report(result)
    print(report)
    assert result.ok, report
    assert set(result.faults_by_kind) == set(FAULT_KINDS), f"fault kinds not injected: {report}"
    events = load_history(result.history_path)
    assert result.events_by_type.get("send:ok", 0) > 1_000 and result.events_by_type.get("poll", 0) > 1_000
    assert {type(e).__name__ for e in events} >= {"Send", "Poll", "Commit", "Resume", "CommittedRead",
                                                  "FinalRead", "Fault"}
    assert (tmp_path / "report.txt").read_text().startswith("rafka verify:")
