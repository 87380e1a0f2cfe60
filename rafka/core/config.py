"""Topic configs: every name Kafka 4.x's LogConfig defines, Kafka's defaults and
Kafka's validation (ConfigDef: type, range, valid values), checked once at the
boundary.

A config arrives as a dict of Kafka names to strings or typed values (as
`kafka-topics.sh --config` or CreateTopics gives them). `TopicConfig.from_dict`
validates every entry and returns a frozen value; an unknown name or a bad value
raises InvalidConfig (with Kafka's wording: "Invalid value X for configuration N:
Value must be at least 1") and nothing is built. Attributes are the Kafka names
with dots as underscores (`segment.bytes` -> `segment_bytes`); a LIST is a tuple.
Callers: core.metadata (CreateTopics validates here; IncrementalAlterConfigs
and AlterConfigs merge their operations with `altered_overrides`), core.log and
core.replica (what takes effect, at once when a topic is altered),
protocol.handlers.describe_configs (every name, its type and its value as Kafka
writes it).

What takes effect in rafka:
  segment.bytes, segment.ms, segment.jitter.ms, segment.index.bytes and, on a
  compacted topic, max.compaction.lag.ms: when the active segment rolls (on append
  only, as UnifiedLog.maybeRoll);
  index.interval.bytes; max.message.bytes; message.timestamp.type;
  min.insync.replicas; retention.ms, retention.bytes (cleanup.policy has delete);
  cleanup.policy (compact, delete, both, or neither); delete.retention.ms,
  min.compaction.lag.ms, max.compaction.lag.ms, min.cleanable.dirty.ratio: when
  the log cleaner cleans and what it keeps (core.log).
Kept only (accepted, validated, stored and described, no behaviour behind them):
  compression.type and compression.{gzip,lz4,zstd}.level (the leader keeps the
  producer's batches as they are, i.e. Kafka's `producer`); file.delete.delay.ms
  (files go at once); flush.messages, flush.ms (rafka flushes on roll and close;
  durability is replication's, DESIGN section 3.13); preallocate;
  message.timestamp.before.max.ms, message.timestamp.after.max.ms (timestamps are
  not checked against the clock yet); leader/follower.replication.throttled.replicas
  (no replication quotas); local.retention.ms, local.retention.bytes,
  remote.log.copy.disable, remote.log.delete.on.disable (no tiered storage).
Refused where Kafka on rafka's brokers would refuse:
  remote.storage.enable=true (Kafka's answer on a broker without tiered storage);
  unclean.leader.election.enable=true (rafka never elects an out-of-sync replica,
  DESIGN invariant 5); min.compaction.lag.ms > max.compaction.lag.ms.
One deliberate difference: segment.bytes keeps Kafka 3.x's minimum (14), not 4.x's
1 MiB: rafka's tests and small offsets topics roll tiny segments, which Kafka 4.x
does through its internal `internal.segment.bytes` instead.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rafka.core.errors import InvalidConfig, InvalidRequest

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")                                   # Java's parseInt / parseLong
_DOUBLE = re.compile(r"[+-]?(Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?")   # parseDouble, no NaN
_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")

# Kafka's ConfigDef.Type, by the code DescribeConfigs answers for each (ConfigType).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = "BOOLEAN", "STRING", "INT", "LONG", "DOUBLE", "LIST"
DESCRIBE_TYPE_CODES = {BOOLEAN: 1, STRING: 2, INT: 3, LONG: 5, DOUBLE: 6, LIST: 7}

# A validator returns None for a good value, else Kafka's message (ConfigException's
# text after "Invalid value X for configuration N: ").
Validator = Callable[[str, Any], "str | None"]


def at_least(low) -> Validator:
    return lambda name, value: None if value >= low else f"Value must be at least {low}"


def between(low, high) -> Validator:
    def check(name, value):
        if value < low:
            return f"Value must be at least {low}"
        if value > high:
            return f"Value must be no more than {high}"
        return None
    return check


def one_of(*choices: str) -> Validator:
    return lambda name, value: None if value in choices else f"String must be one of: {', '.join(choices)}"


def gzip_level(name: str, value: int) -> str | None:
    """Deflater's levels 1..9, or -1 (its default)."""
    return None if 1 <= value <= 9 or value == -1 else "Value must be between 1 and 9 or equal to -1"


def throttled_replicas(name: str, value: tuple[str, ...]) -> str | None:
    if all(re.fullmatch(r"([0-9]+:[0-9]+)?", s) for s in value) or "".join(value) == "*":
        return None
    return (f"{name} must be the literal '*' or a list of replicas in the following format: "
            f"[partitionId]:[brokerId],[partitionId]:[brokerId],...")


@dataclasses.dataclass(frozen=True)
class ConfigDef:
    name: str
    kind: str                          # Kafka's ConfigDef.Type: BOOLEAN, STRING, INT, LONG, DOUBLE, LIST
    default: Any
    validator: Validator | None = None
    each: bool = False                 # a LIST whose validator checks each element (ValidList)

    def parse(self, raw: Any) -> Any:
        value = self._coerce(raw)
        if self.validator is None:
            return value
        for checked in (value if self.each else (value,)):
            problem = self.validator(self.name, checked)
            if problem is not None:
                shown = f"[{', '.join(checked)}]" if isinstance(checked, tuple) else kafka_string(checked)
                raise InvalidConfig(f"Invalid value {shown} for configuration {self.name}: {problem}")
        return value

    def _coerce(self, raw: Any) -> Any:
        """Kafka's ConfigDef.parseType: strings are trimmed and parsed; typed values
        must already be of the type."""
        text = raw.strip() if isinstance(raw, str) else None
        if self.kind == BOOLEAN:
            if isinstance(raw, bool):
                return raw
            if text is not None and text.lower() in ("true", "false"):
                return text.lower() == "true"
            raise self._refused(raw, "Expected value to be either true or false")
        if self.kind == STRING:
            if text is None:
                raise self._refused(raw, f"Expected value to be a string, but it was a {type(raw).__name__}")
            return text
        if self.kind in (INT, LONG):
            low, high = (INT32_MIN, INT32_MAX) if self.kind == INT else (INT64_MIN, INT64_MAX)
            if isinstance(raw, int) and not isinstance(raw, bool):
                value = raw
            elif text is not None and _INTEGER.fullmatch(text):
                value = int(text)
            else:
                value = None
            if value is None or not low <= value <= high:
                raise self._refused(raw, f"Not a number of type {self.kind}")
            return value
        if self.kind == DOUBLE:
            if isinstance(raw, (int, float)) and not isinstance(raw, bool):
                return float(raw)
            if text is not None and _DOUBLE.fullmatch(text):
                return float(text.rstrip("fFdD"))
            raise self._refused(raw, f"Not a number of type {self.kind}")
        if self.kind == LIST:
            if isinstance(raw, (list, tuple)):
                return tuple(str(element).strip() for element in raw)
            if text is None:
                raise self._refused(raw, "Expected a comma separated list.")
            return tuple(_COMMA_WITH_WHITESPACE.split(text)) if text else ()
        raise AssertionError(f"unknown config type {self.kind}")

    def _refused(self, raw: Any, problem: str) -> InvalidConfig:
        return InvalidConfig(f"Invalid value {raw} for configuration {self.name}: {problem}")


def kafka_string(value: Any) -> str:
    """A value as Kafka writes it (ConfigDef.convertToString): "true", "0.5",
    "compact,delete", "" for an empty list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(value)
    return str(value)


def defs_by_name(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


# Kafka 4.x's topic configs (LogConfig's CONFIG), in its order.
TOPIC_CONFIG_DEFS = defs_by_name(
    ConfigDef("segment.bytes", INT, 1_073_741_824, at_least(14)),
    ConfigDef("segment.ms", LONG, 604_800_000, at_least(1)),
    ConfigDef("segment.jitter.ms", LONG, 0, at_least(0)),
    ConfigDef("segment.index.bytes", INT, 10_485_760, at_least(4)),
    ConfigDef("flush.messages", LONG, INT64_MAX, at_least(1)),
    ConfigDef("flush.ms", LONG, INT64_MAX, at_least(0)),
    ConfigDef("retention.bytes", LONG, -1),                       # any value; below 0: unlimited
    ConfigDef("retention.ms", LONG, 604_800_000, at_least(-1)),    # -1: unlimited
    ConfigDef("max.message.bytes", INT, 1_048_588, at_least(0)),
    ConfigDef("index.interval.bytes", INT, 4096, at_least(0)),
    ConfigDef("delete.retention.ms", LONG, 86_400_000, at_least(0)),
    ConfigDef("min.compaction.lag.ms", LONG, 0, at_least(0)),
    ConfigDef("max.compaction.lag.ms", LONG, INT64_MAX, at_least(1)),
    ConfigDef("file.delete.delay.ms", LONG, 60_000, at_least(0)),
    ConfigDef("min.cleanable.dirty.ratio", DOUBLE, 0.5, between(0, 1)),
    ConfigDef("cleanup.policy", LIST, ("delete",), one_of("compact", "delete"), each=True),
    ConfigDef("unclean.leader.election.enable", BOOLEAN, False),
    ConfigDef("min.insync.replicas", INT, 1, at_least(1)),
    ConfigDef("compression.type", STRING, "producer",
              one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ConfigDef("compression.gzip.level", INT, -1, gzip_level),
    ConfigDef("compression.lz4.level", INT, 9, between(1, 17)),
    ConfigDef("compression.zstd.level", INT, 3, between(-131_072, 22)),
    ConfigDef("preallocate", BOOLEAN, False),
    ConfigDef("message.timestamp.type", STRING, "CreateTime", one_of("CreateTime", "LogAppendTime")),
    ConfigDef("message.timestamp.before.max.ms", LONG, INT64_MAX, at_least(0)),
    ConfigDef("message.timestamp.after.max.ms", LONG, 3_600_000, at_least(0)),   # 1 hour since Kafka 4.0
    ConfigDef("leader.replication.throttled.replicas", LIST, (), throttled_replicas),
    ConfigDef("follower.replication.throttled.replicas", LIST, (), throttled_replicas),
    ConfigDef("remote.storage.enable", BOOLEAN, False),
    ConfigDef("local.retention.ms", LONG, -2, at_least(-2)),       # -2: retention.ms's value
    ConfigDef("local.retention.bytes", LONG, -2, at_least(-2)),    # -2: retention.bytes's value
    ConfigDef("remote.log.copy.disable", BOOLEAN, False),
    ConfigDef("remote.log.delete.on.disable", BOOLEAN, False),
)


def parse_configs(defs: Mapping[str, ConfigDef], overrides: Mapping[str, Any] | None,
                  kind: str) -> dict[str, Any]:
    """All of `defs` with `overrides` applied, validated; InvalidConfig on any bad entry."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(defs))
    if unknown:
        raise InvalidConfig(f"Unknown {kind} config name(s): {', '.join(unknown)}")
    return {name: (d.parse(overrides[name]) if name in overrides else d.default)
            for name, d in defs.items()}


def _refuse_what_rafka_brokers_cannot_hold(values: Mapping[str, Any]) -> None:
    """LogConfig.validateValues, and what Kafka refuses on a broker like rafka's."""
    min_lag_ms, max_lag_ms = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if min_lag_ms > max_lag_ms:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({min_lag_ms}) > "
                            f"max.compaction.lag.ms ({max_lag_ms})")
    if values["remote.storage.enable"]:
        # Kafka's answer when remote.log.storage.system.enable is false: rafka has no tiered storage.
        raise InvalidConfig("Tiered Storage functionality is disabled in the broker. "
                            "Topic cannot be configured with remote log storage.")
    if values["unclean.leader.election.enable"]:
        raise InvalidConfig("Invalid value true for configuration unclean.leader.election.enable: "
                            "rafka never elects an out-of-sync replica; only false is accepted")


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    flush_messages: int
    flush_ms: int
    retention_bytes: int
    retention_ms: int
    max_message_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    file_delete_delay_ms: int
    min_cleanable_dirty_ratio: float
    cleanup_policy: tuple[str, ...]
    unclean_leader_election_enable: bool
    min_insync_replicas: int
    compression_type: str
    compression_gzip_level: int
    compression_lz4_level: int
    compression_zstd_level: int
    preallocate: bool
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    leader_replication_throttled_replicas: tuple[str, ...]
    follower_replication_throttled_replicas: tuple[str, ...]
    remote_storage_enable: bool
    local_retention_ms: int
    local_retention_bytes: int
    remote_log_copy_disable: bool
    remote_log_delete_on_disable: bool

    @classmethod
    def from_dict(cls, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        values = parse_configs(TOPIC_CONFIG_DEFS, overrides, "topic")
        _refuse_what_rafka_brokers_cannot_hold(values)
        return cls(**{name.replace(".", "_"): value for name, value in values.items()})

    def to_dict(self) -> dict[str, Any]:
        """Kafka names to values, e.g. for describe output and persistence."""
        return {name: getattr(self, name.replace(".", "_")) for name in TOPIC_CONFIG_DEFS}

    @property
    def compacted(self) -> bool:
        """cleanup.policy has compact: the log cleaner keeps the latest record per key."""
        return "compact" in self.cleanup_policy

    @property
    def deletes_by_retention(self) -> bool:
        """cleanup.policy has delete: segments go by retention.ms / retention.bytes."""
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment's first record may get before an append rolls
        it (LogConfig.maxSegmentMs): a compacted topic rolls by max.compaction.lag.ms
        too, or records in the active segment could never be cleaned in time."""
        if self.compacted:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def random_segment_jitter_ms(self, rng) -> int:
        """LogConfig.randomSegmentJitter: drawn once per segment, in
        [0, min(segment.jitter.ms, segment.ms)); `rng` is a random.Random."""
        if self.segment_jitter_ms == 0:
            return 0
        return rng.randrange(min(self.segment_jitter_ms, self.segment_ms))


# IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType ids).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
ConfigOp = tuple[int, str, "str | None"]    # (operation, config name, value; None only to DELETE)


def check_config_ops(ops: Sequence[ConfigOp]) -> None:
    """The checks Kafka's brokers make on any resource's operations before anything
    else (ConfigAdminManager.preprocess): INVALID_REQUEST for a name given twice
    or a null value to anything but DELETE."""
    names = [name for _, name, _ in ops]
    if len(set(names)) != len(names):
        raise InvalidRequest("Error due to duplicate config keys")
    null_values = [name for op, name, value in ops if op != DELETE and value is None]
    if null_values:
        raise InvalidRequest(f"Null value not supported for : {', '.join(null_values)}")


def altered_overrides(current: Mapping[str, Any], ops: Sequence[ConfigOp]) -> dict[str, Any]:
    """A topic's overrides after `ops`, in order, as Kafka's controller merges them
    (ConfigurationControlManager.incrementalAlterConfigResource): SET puts the
    value, DELETE drops the override (back to the default), APPEND adds the
    list elements not there yet, SUBTRACT removes them, both starting from the
    override or else the default, LIST configs only. The request's shape is
    checked first, as Kafka's brokers do before forwarding (ConfigAdminManager.
    preprocess): a name twice, or a null value to anything but DELETE, is
    INVALID_REQUEST. AlterConfigs (legacy: the given configs replace every
    override) is `altered_overrides({}, [(SET, name, value), ...])`.
    Values are not validated here: the caller builds the TopicConfig. Pure."""
    check_config_ops(ops)
    merged = dict(current)
    for op, name, value in ops:
        if op == SET:
            merged[name] = value
        elif op == DELETE:
            merged.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            definition = TOPIC_CONFIG_DEFS.get(name)
            if definition is None or definition.kind != LIST:
                raise InvalidConfig(f"Can't {OP_NAMES[op]} to key {name} because its type is not LIST.")
            held = list(definition.parse(merged[name]) if name in merged else definition.default)
            held = [element for element in held if element]
            given = [element.strip() for element in value.split(",")]
            if op == APPEND:
                held += [element for element in dict.fromkeys(given) if element and element not in held]
            else:
                held = [element for element in held if element not in given]
            merged[name] = ",".join(held)
        else:
            raise InvalidRequest(f"Unknown operations type {op}")
    return merged
