"""rafka verify's output dir: a run checks only what it wrote itself."""

import pytest

from rafka.core.history import Poll, load_history
from rafka.verify import fresh_run_dir
from rafka.verify.workload import History, merge_actor_polls

pytestmark = pytest.mark.core


def test_fresh_run_dir__an_earlier_runs_actor_polls_and_history_are_not_merged_into_this_run(tmp_path):
    """An earlier run's member actor files in the same --out dir were merged as this
    run's (the same producer-N-i values at other offsets): 4,578 false duplicates,
    inconsistent offsets and reads above the HW in one run."""
    actors = tmp_path / "actors"
    actors.mkdir()
    stale = Poll("actor-1", 1, "verify-actors", 1, "verify", 2, 1, "producer-0-2", 10)
    (actors / "actor-1.jsonl").write_text(stale.to_json() + "\n")
    (actors / "notes.txt").write_text("not a run's file")
    (tmp_path / "history.jsonl").write_text(stale.to_json() + "\n")

    history_path, actor_log_dir = fresh_run_dir(tmp_path)
    fresh = Poll("actor-2", 2, "verify-actors", 1, "verify", 2, 5, "producer-0-2", 20)
    with open(f"{actor_log_dir}/actor-2.jsonl", "w") as out:
        out.write(fresh.to_json() + "\n")
    history = History(history_path)
    merge_actor_polls(actor_log_dir, history)
    history.close()

    assert load_history(history_path) == [fresh]
    assert (actors / "notes.txt").exists()   # only the run's own files go
