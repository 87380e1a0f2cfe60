"""Topic configs: Kafka's names, Kafka's defaults, checked once at the boundary.

A config arrives as a dict of Kafka names to strings or typed values (as
`kafka-topics.sh --config` gives them). `TopicConfig.from_dict` validates every
entry and returns a frozen value; an unknown name or a bad value raises
InvalidConfig and nothing is built. Attributes are the Kafka names with dots as
underscores (`segment.bytes` -> `segment_bytes`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rafka.core.errors import InvalidConfig

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class ConfigDef:
    name: str
    type: type
    default: Any
    check: Callable[[Any], bool] = lambda value: True
    rule: str = ""

    def parse(self, raw: Any) -> Any:
        value = self._coerce(raw)
        if not self.check(value):
            raise InvalidConfig(f"Invalid value {raw!r} for configuration {self.name}: {self.rule}")
        return value

    def _coerce(self, raw: Any) -> Any:
        try:
            if self.type is bool:
                if isinstance(raw, bool):
                    return raw
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    raise ValueError(raw)
                return text == "true"
            if self.type is int:
                if isinstance(raw, bool) or isinstance(raw, float):
                    raise ValueError(raw)
                return int(str(raw).strip())
            return str(raw).strip()
        except ValueError:
            raise InvalidConfig(
                f"Invalid value {raw!r} for configuration {self.name}: "
                f"expected {self.type.__name__}") from None


def at_least(low: int) -> Callable[[int], bool]:
    return lambda value: value >= low


def between(low: int, high: int) -> Callable[[int], bool]:
    return lambda value: low <= value <= high


def one_of(*choices: str) -> Callable[[str], bool]:
    return lambda value: value in choices


def defs_by_name(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


TOPIC_CONFIG_DEFS = defs_by_name(
    ConfigDef("segment.bytes", int, 1_073_741_824, between(14, INT32_MAX), "in [14, 2^31-1]"),
    ConfigDef("segment.ms", int, 604_800_000, at_least(1), ">= 1"),
    ConfigDef("segment.index.bytes", int, 10_485_760, at_least(8), ">= 8"),
    ConfigDef("index.interval.bytes", int, 4096, at_least(0), ">= 0"),
    ConfigDef("retention.ms", int, 604_800_000, at_least(-1), ">= -1 (-1: unlimited)"),
    ConfigDef("retention.bytes", int, -1, at_least(-1), ">= -1 (-1: unlimited)"),
    ConfigDef("cleanup.policy", str, "delete", one_of("delete", "compact"), "delete or compact"),
    ConfigDef("delete.retention.ms", int, 86_400_000, at_least(0), ">= 0"),
    ConfigDef("min.compaction.lag.ms", int, 0, at_least(0), ">= 0"),
    ConfigDef("max.message.bytes", int, 1_048_588, at_least(0), ">= 0"),
    ConfigDef("min.insync.replicas", int, 1, at_least(1), ">= 1"),
    ConfigDef("message.timestamp.type", str, "CreateTime", one_of("CreateTime", "LogAppendTime"),
              "CreateTime or LogAppendTime"),
    ConfigDef("unclean.leader.election.enable", bool, False, lambda value: value is False,
              "rafka never elects an out-of-sync replica; only false is accepted"),
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


@dataclasses.dataclass(frozen=True)
class TopicConfig:
    segment_bytes: int
    segment_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    cleanup_policy: str
    delete_retention_ms: int
    min_compaction_lag_ms: int
    max_message_bytes: int
    min_insync_replicas: int
    message_timestamp_type: str
    unclean_leader_election_enable: bool

    @classmethod
    def from_dict(cls, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        values = parse_configs(TOPIC_CONFIG_DEFS, overrides, "topic")
        return cls(**{name.replace(".", "_"): value for name, value in values.items()})

    def to_dict(self) -> dict[str, Any]:
        """Kafka names to values, e.g. for describe output and persistence."""
        return {name: getattr(self, name.replace(".", "_")) for name in TOPIC_CONFIG_DEFS}

    @property
    def compacted(self) -> bool:
        return self.cleanup_policy == "compact"
