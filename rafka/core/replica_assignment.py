"""Which replica a replica actor ("shell") holds, on its broker's disk.

A shell is made before its replica is known (core.replica_pool) and given one by
`assign`; Ray restarts a crashed actor by running its constructor again with the
arguments it was made with, which name no replica. So `assign` writes the
assignment here first, and a constructor that finds one reopens that replica
(DESIGN section 4: a restarted replica reopens its own log). A whole-cluster
restart recreates each shell by its name, from the controller's metadata, and
the same file answers.

  <log dir>/replica-shells/<shell key>.json   {topic, partition, replica_id, topic_id, config}

Invariants: a file is replaced atomically (a reader sees a whole assignment or
none); a shell's assignment never changes once written (one shell, one replica:
`write` refuses another); the file goes when the replica is deleted, with its log.

Pure logic and small file I/O, no Ray. Callers: the replica actor only.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from rafka.core.actor_names import shell_key
from rafka.core.checkpoint import fsync_dir

SHELLS_DIRECTORY = "replica-shells"


@dataclasses.dataclass(frozen=True)
class ReplicaAssignment:
    topic: str
    partition: int
    replica_id: int
    topic_id: str
    config: dict[str, Any]   # the topic's overrides when assigned (the image brings later ones)

    def same_replica(self, other: ReplicaAssignment) -> bool:
        return (self.topic, self.partition, self.replica_id, self.topic_id) == (
            other.topic, other.partition, other.replica_id, other.topic_id)


def assignment_path(log_dir: str | os.PathLike, shell: str) -> Path:
    return Path(log_dir) / SHELLS_DIRECTORY / f"{shell_key(shell)}.json"


def read_assignment(log_dir: str | os.PathLike, shell: str) -> ReplicaAssignment | None:
    """The shell's assignment, or None (never assigned, or deleted). A file that
    does not parse is a bug or a damaged disk: it raises."""
    try:
        text = assignment_path(log_dir, shell).read_text()
    except FileNotFoundError:
        return None
    fields = json.loads(text)
    return ReplicaAssignment(topic=fields["topic"], partition=int(fields["partition"]),
                             replica_id=int(fields["replica_id"]), topic_id=fields["topic_id"],
                             config=dict(fields["config"]))


def write_assignment(log_dir: str | os.PathLike, shell: str, assignment: ReplicaAssignment) -> None:
    """Record the assignment (atomically); the same one again is a no-op, another
    one raises ValueError: a shell holds one replica for its whole life."""
    held = read_assignment(log_dir, shell)
    if held is not None:
        if not held.same_replica(assignment):
            raise ValueError(f"{shell} holds {held.topic}-{held.partition} replica {held.replica_id} "
                             f"(topic id {held.topic_id}): it cannot take another replica")
        return
    path = assignment_path(log_dir, shell)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(dataclasses.asdict(assignment), sort_keys=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_assignment(log_dir: str | os.PathLike, shell: str) -> None:
    try:
        os.unlink(assignment_path(log_dir, shell))
    except FileNotFoundError:
        return
