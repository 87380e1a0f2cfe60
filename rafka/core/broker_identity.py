"""A broker's identity lives on its disk: `<log dir>/meta.properties`.

A broker is a Ray node carrying the label `rafka-broker-id`; its log dir is
`<data dir>/broker-<id>`. The id is written into the log dir's meta.properties
the first time the broker starts (`rafka broker-id`, run before `ray start`, or
`local_cluster`), and the cluster id the first time a replica of a cluster opens
it. Both are checked at every later open, so a log dir is never written by
another broker or another cluster: a mismatch is a typed error and nothing on the
disk is touched. Ray node ids change at every node restart; broker ids do not,
which is what lets a restarted node find its replicas' logs again.

The file is Kafka's ZooKeeper-era meta.properties (version 0: `broker.id`, and
`cluster.id` once known), replaced atomically. Generated ids start above Kafka's
reserved.broker.max.id (1000), as Kafka's broker.id.generation does, so they never
collide with ids an operator chose.

Also here: `partition.metadata` (KIP-516) in each replica's directory, holding
the topic id, so a deleted and re-created topic never reopens an old log.

Pure logic and small file I/O, no Ray. Callers: the replica actor, `rafka
broker-id`, `local_cluster`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from pathlib import Path

from rafka.core.checkpoint import fsync_dir
from rafka.core.errors import InconsistentBrokerId, InconsistentClusterId, InvalidConfig

META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
BROKER_ID_LABEL = "rafka-broker-id"
BROKER_RESOURCE = "rafka_broker"   # the Ray resource a broker node offers
RESERVED_BROKER_MAX_ID = 1000
MAX_BROKER_ID = (1 << 31) - 1
_LOG_DIR_NAME = re.compile(r"^broker-(\d+)$")


@dataclasses.dataclass(frozen=True)
class BrokerIdentity:
    broker_id: int
    cluster_id: str | None
    log_dir: Path


def broker_log_dir(data_dir: str | os.PathLike, broker_id: int) -> Path:
    return Path(data_dir) / f"broker-{broker_id}"


def validate_broker_id(broker_id) -> int:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or not 0 <= broker_id <= MAX_BROKER_ID:
        raise InvalidConfig(f"broker.id must be an integer in [0, {MAX_BROKER_ID}], got {broker_id!r}")
    return broker_id


def read_identity(log_dir: str | os.PathLike) -> BrokerIdentity | None:
    """The identity in `log_dir`, or None when it has no meta.properties yet."""
    path = Path(log_dir) / META_PROPERTIES
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    properties = _parse_properties(text)
    try:
        broker_id = int(properties["broker.id"])
    except (KeyError, ValueError):
        raise InconsistentBrokerId(f"{path} has no valid broker.id: the log dir cannot be used") from None
    return BrokerIdentity(broker_id, properties.get("cluster.id") or None, Path(log_dir))


def ensure_identity(log_dir: str | os.PathLike, *, broker_id: int | None = None,
                    cluster_id: str | None = None, rng: random.Random | None = None) -> BrokerIdentity:
    """Open (or, the first time, create) the identity of the broker owning `log_dir`.

    An existing identity must name `broker_id` (when given) and `cluster_id` (when
    both it and the file have one); a file without a cluster id takes the given
    one. Without an existing file, `broker_id` or a generated id is written.
    Raises InconsistentBrokerId / InconsistentClusterId, writing nothing."""
    if broker_id is not None:
        validate_broker_id(broker_id)
    log_dir = Path(log_dir)
    found = read_identity(log_dir)
    if found is not None:
        if broker_id is not None and found.broker_id != broker_id:
            raise InconsistentBrokerId(
                f"the log dir {log_dir} belongs to broker {found.broker_id}, not broker {broker_id}")
        if cluster_id is not None and found.cluster_id not in (None, cluster_id):
            raise InconsistentClusterId(
                f"the log dir {log_dir} belongs to cluster {found.cluster_id}, not {cluster_id}")
        if cluster_id is None or found.cluster_id == cluster_id:
            return found
        identity = dataclasses.replace(found, cluster_id=cluster_id)
    else:
        if broker_id is None:
            broker_id = (rng or random.SystemRandom()).randint(RESERVED_BROKER_MAX_ID + 1, MAX_BROKER_ID)
        identity = BrokerIdentity(broker_id, cluster_id, log_dir)
    _write_identity(identity)
    return identity


def identity_in_data_dir(data_dir: str | os.PathLike, *, broker_id: int | None = None,
                         rng: random.Random | None = None) -> BrokerIdentity:
    """What `rafka broker-id` prints: the one broker whose log dir is under
    `data_dir`, created on first use (as `broker_id`, or with a generated id).
    Two broker log dirs under one data dir are ambiguous: a typed error."""
    data_dir = Path(data_dir)
    existing = sorted(p for p in data_dir.glob("broker-*") if _LOG_DIR_NAME.match(p.name)
                      and (p / META_PROPERTIES).exists()) if data_dir.is_dir() else []
    if broker_id is not None:
        validate_broker_id(broker_id)
        others = [p.name for p in existing if p.name != f"broker-{broker_id}"]
        if others:
            raise InconsistentBrokerId(f"{data_dir} already holds the log dir of another broker "
                                       f"({', '.join(others)}), not broker {broker_id}")
        return ensure_identity(broker_log_dir(data_dir, broker_id), broker_id=broker_id)
    if len(existing) > 1:
        raise InconsistentBrokerId(f"{data_dir} holds the log dirs of several brokers "
                                   f"({', '.join(p.name for p in existing)}): pass --broker-id")
    if existing:
        found = read_identity(existing[0])
        if _LOG_DIR_NAME.match(existing[0].name).group(1) != str(found.broker_id):
            raise InconsistentBrokerId(f"{existing[0]} holds the identity of broker {found.broker_id}")
        return found
    new_id = (rng or random.SystemRandom()).randint(RESERVED_BROKER_MAX_ID + 1, MAX_BROKER_ID)
    return ensure_identity(broker_log_dir(data_dir, new_id), broker_id=new_id)


def _write_identity(identity: BrokerIdentity) -> None:
    identity.log_dir.mkdir(parents=True, exist_ok=True)
    lines = ["#rafka broker identity: do not edit", "version=0", f"broker.id={identity.broker_id}"]
    if identity.cluster_id:
        lines.append(f"cluster.id={identity.cluster_id}")
    _write_atomically(identity.log_dir / META_PROPERTIES, "\n".join(lines) + "\n")


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _parse_properties(text: str, separator: str = "=") -> dict[str, str]:
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition(separator)
        properties[name.strip()] = value.strip()
    return properties


# --- partition.metadata (KIP-516) ----------------------------------------------------

def claim_partition_directory(directory: str | os.PathLike, topic_id: str) -> Path | None:
    """Make `directory` the log of the topic with id `topic_id`.

    A directory left by an earlier topic of the same name (deleted while this
    broker was away, then re-created) is moved aside as `<name>.<old id>-stray`
    and never reopened: returns where it went, else None. Kafka's KRaft brokers
    likewise rename such stray logs instead of serving them."""
    directory = Path(directory)
    path = directory / PARTITION_METADATA
    stray = None
    try:
        found = _parse_properties(path.read_text(), ":").get("topic_id")
    except FileNotFoundError:
        found = None
        if directory.is_dir() and any(directory.iterdir()):
            found = "unknown"   # a log without partition.metadata: of no topic we can name
    if found is not None and found != topic_id:
        stray = directory.with_name(f"{directory.name}.{found}-stray")
        os.replace(directory, stray)
    if found != topic_id:
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, f"version: 0\ntopic_id: {topic_id}\n")
    return stray
