"""Offset resets as Kafka's consumer and kafka-consumer-groups.sh do them, and the
text those tools print: java.time.Duration's ISO-8601 durations; KIP-1106's
auto.offset.reset values; --reset-offsets planning; the tool's table layout; and
dump-offsets lines as Kafka 3.x's OffsetsMessageFormatter / GroupMetadataMessageFormatter.

Invariants: a planned offset is the log start or end, the committed offset, what
`offsets_for_time` returned, or a --to-offset / --shift-by target clamped into
[log start, log end] with Kafka's warning. A partition missing from `beginning` or
`end` refuses the whole plan, as Kafka checks partitions first. Planning writes
nothing (the caller commits the plan, or prints it for --dry-run). Pure: no I/O; the
clock comes in as `now_ms`. Like Kafka, a --to-datetime without a zone is UTC.

Where rafka differs, on purpose: a refused auto.offset.reset says why (Kafka's
validator drops the reason); --to-datetime wants exactly three millisecond digits
(SimpleDateFormat reads ".5" as 5 ms); a table column widens for a cell longer than
Kafka's fixed width (printf overflows it), without Kafka's leading blank line; a group
record lists members in record order (Kafka: HashMap order).
Callers: the consumer (auto_offset_reset), `rafka consumer-groups`, `rafka dump-offsets`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from rafka.core import consumer_group_records
from rafka.core.errors import UnknownTopicOrPartition
from rafka.core.metadata import uuid_as_id
from rafka.core.offsets_schema import GroupKey, GroupValue, MemberMetadata, OffsetKey, OffsetValue

Partition = tuple[str, int]  # (topic, partition); TopicPartition is one
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NANOS_PER_MS, _NANOS_PER_S = 1_000_000, 1_000_000_000

# --- durations and auto.offset.reset ------------------------------------------------

# Java's grammar: a sign on the whole and on each number, letters in either case
# (ASCII only, as Java's CASE_INSENSITIVE), '.' or ',' before at most nine digits.
_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<days>[-+]?[0-9]+)D)?"
    r"(?P<time>T(?:(?P<hours>[-+]?[0-9]+)H)?(?:(?P<minutes>[-+]?[0-9]+)M)?"
    r"(?:(?P<seconds>[-+]?[0-9]+)(?:[.,](?P<fraction>[0-9]{0,9}))?S)?)?",
    re.IGNORECASE | re.ASCII)
# Seconds first: Java sums them in this order, each step in int64 arithmetic.
_SECONDS_PER_UNIT = (("seconds", 1), ("minutes", 60), ("hours", 3_600), ("days", 86_400))
AUTO_OFFSET_RESET_STRATEGIES = ("earliest", "latest", "none")
_BY_DURATION_PREFIX = "by_duration:"


def _duration_ns(text: str) -> int:
    match = _DURATION.fullmatch(text)
    if (not match or (match["time"] or "").upper() == "T"
            or all(match[unit] is None for unit, _ in _SECONDS_PER_UNIT)):
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r}")

    total_s = 0
    try:  # int() also refuses past Python's digit limit
        for unit, seconds_per_unit in _SECONDS_PER_UNIT:
            if match[unit] is not None:
                total_s = _int64(total_s + _int64(_int64(int(match[unit])) * seconds_per_unit))
    except ValueError:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r} (out of range)") from None
    nanos = int((match["fraction"] or "").ljust(9, "0"))
    if (match["seconds"] or "").startswith("-"):
        nanos = -nanos  # "PT-0.5S" is minus half a second: the fraction takes the seconds' sign
    total_ns = total_s * _NANOS_PER_S + nanos
    return -total_ns if match["sign"] == "-" else total_ns


def parse_iso_duration_ms(text: str) -> int:
    """`Duration.parse(text).toMillis()`: "PT1H" -> 3_600_000, "-PT1M" -> -60_000,
    "PT-1H30M" -> -1_800_000. Below a millisecond truncates toward zero, as toMillis."""
    return _to_millis(_duration_ns(text), text)


def _to_millis(total_ns: int, text: str) -> int:
    millis = abs(total_ns) // _NANOS_PER_MS
    try:
        return _int64(-millis if total_ns < 0 else millis)
    except ValueError:
        raise ValueError(f"Text cannot be parsed to a Duration: {text!r} (out of range)") from None


def _int64(value: int) -> int:
    """Java's long arithmetic throws where a value leaves int64; so does Duration.parse."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(value)
    return value


def parse_auto_offset_reset(value: str) -> tuple[str, int | None]:
    """("earliest" | "latest" | "none", None) or ("by_duration", duration_ms), as Kafka's
    AutoOffsetResetStrategy: names are lower case only, and the duration may not be negative."""
    if value in AUTO_OFFSET_RESET_STRATEGIES:
        return value, None
    reason = "Unknown auto offset reset strategy."
    if value == "by_duration":
        reason = "<:duration> part is missing in by_duration auto offset reset strategy."
    elif isinstance(value, str) and value.startswith(_BY_DURATION_PREFIX):
        text = value[len(_BY_DURATION_PREFIX):]
        try:
            duration_ns = _duration_ns(text)
            duration_ms = _to_millis(duration_ns, text)
        except ValueError:
            reason = "Unable to parse duration string in by_duration offset reset strategy."
        else:
            if duration_ns >= 0:
                return "by_duration", duration_ms
            reason = "Negative duration is not supported in by_duration offset reset strategy."
    raise ValueError(f"Invalid value {value} for configuration auto.offset.reset: {reason} The value must be "
                     "either 'earliest', 'latest', 'none' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


# --- --to-datetime ----------------------------------------------------------------

_DATETIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})"
                       r"(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?", re.ASCII)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def parse_datetime_ms(text: str) -> int:
    """--to-datetime's 'yyyy-MM-ddTHH:mm:ss.SSS', then optionally Z, +hh, +hhmm or +hh:mm.
    No zone means UTC: Kafka's Utils.getDateTime appends 'Z' too."""
    try:
        match = _DATETIME.fullmatch(text)
        if not match:
            raise ValueError(text)
        *fields, millis = (int(group) for group in match.groups()[:7])
        zone = match[8] or "Z"
        hours, minutes = (0, 0) if zone == "Z" else (int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0)
        if hours > 23 or minutes > 59:
            raise ValueError(zone)
        offset = datetime.timedelta(hours=hours, minutes=minutes) * (-1 if zone.startswith("-") else 1)
        moment = datetime.datetime(*fields, millis * 1000, tzinfo=datetime.timezone(offset))
    except ValueError:
        raise ValueError(f"Error parsing timestamp {text!r}: expected yyyy-MM-ddTHH:mm:ss.SSS, optionally "
                         "followed by Z, +hh, +hhmm or +hh:mm (no zone is UTC)") from None
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


# --- reset planning ---------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ToEarliest:
    pass


@dataclasses.dataclass(frozen=True)
class ToLatest:
    pass


@dataclasses.dataclass(frozen=True)
class ToCurrent:
    pass


@dataclasses.dataclass(frozen=True)
class ToOffset:
    offset: int


@dataclasses.dataclass(frozen=True)
class ShiftBy:
    delta: int


@dataclasses.dataclass(frozen=True)
class ToDatetime:
    timestamp_ms: int


@dataclasses.dataclass(frozen=True)
class ByDuration:
    duration_ms: int


ResetSpec = ToEarliest | ToLatest | ToCurrent | ToOffset | ShiftBy | ToDatetime | ByDuration


@dataclasses.dataclass(frozen=True)
class ResetPlan:
    offsets: dict[Partition, int]  # the new committed offset of each partition, in the caller's order
    warnings: tuple[str, ...]      # Kafka's words, for the tool to print


def _name(tp: Partition) -> str:
    return f"{tp[0]}-{tp[1]}"  # Java's TopicPartition.toString


def plan_reset(spec: ResetSpec, partitions: Iterable[Partition], *, committed: Mapping[Partition, int],
               beginning: Mapping[Partition, int], end: Mapping[Partition, int],
               offsets_for_time: Callable[[Partition, int], int | None] | None = None,
               now_ms: int) -> ResetPlan:
    """kafka-consumer-groups --reset-offsets. `offsets_for_time(tp, timestamp_ms)` is the
    first offset whose timestamp is >= timestamp_ms, or None when no record is that late."""
    partitions = list(partitions)
    unknown = [tp for tp in partitions if tp not in beginning or tp not in end]
    if unknown:
        raise UnknownTopicOrPartition(f'The partitions "{",".join(map(_name, unknown))}" do not exist')
    if isinstance(spec, ByDuration):
        spec = ToDatetime(now_ms - spec.duration_ms)  # as Kafka: to-datetime at now - duration
    if isinstance(spec, ToDatetime) and offsets_for_time is None:
        raise TypeError("to_datetime and by_duration need offsets_for_time")
    warnings: list[str] = []

    def clamped(tp: Partition, offset: int) -> int:
        if offset > end[tp]:
            warnings.append(f"New offset ({offset}) is higher than latest offset for topic partition "
                            f"{_name(tp)}. Value will be set to {end[tp]}.")
            return end[tp]
        if offset < beginning[tp]:
            warnings.append(f"New offset ({offset}) is lower than earliest offset for topic partition "
                            f"{_name(tp)}. Value will be set to {beginning[tp]}.")
            return beginning[tp]
        return offset

    def planned(tp: Partition) -> int:
        match spec:
            case ToEarliest():
                return beginning[tp]
            case ToLatest():
                return end[tp]
            case ToCurrent():
                return committed.get(tp, end[tp])  # Kafka: no committed offset -> the log end
            case ToOffset(offset=offset):
                return clamped(tp, offset)
            case ShiftBy(delta=delta):
                if tp not in committed:
                    raise ValueError(f"Cannot shift offset for partition {_name(tp)} "
                                     "since there is no current committed offset")
                return clamped(tp, committed[tp] + delta)
            case ToDatetime(timestamp_ms=timestamp_ms):
                found = offsets_for_time(tp, timestamp_ms)
                if found is None:
                    warnings.append(f"Partition {tp[1]} from topic {tp[0]} is empty. "
                                    "Falling back to latest known offset.")
                    return end[tp]
                return found
        raise TypeError(f"not a reset spec: {spec!r}")

    return ResetPlan({tp: planned(tp) for tp in partitions}, tuple(warnings))


# --- kafka-consumer-groups tables ----------------------------------------------------

MISSING_COLUMN_VALUE = "-"
DESCRIBE_OFFSETS_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                            "CONSUMER-ID", "HOST", "CLIENT-ID")
RESET_OFFSETS_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
# Kafka's printf formats pad every column but the last to at least 15 characters, except these.
_MIN_WIDTH_BY_HEADER = {"PARTITION": 10, "GROUP-INSTANCE-ID": 17, "ASSIGNMENT-STRATEGY": 20, "STATE": 20,
                        "COORDINATOR (ID)": 25}
_MIN_WIDTH = 15


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns one space apart, each padded to Kafka's minimum for its header
    or its widest cell; the last column unpadded; None prints as "-". No final newline."""
    lines = [list(headers)] + [[MISSING_COLUMN_VALUE if cell is None else str(cell) for cell in row]
                               for row in rows]
    if any(len(line) != len(headers) for line in lines):
        raise ValueError(f"every row needs {len(headers)} cells, one per header")
    widths = [max([_MIN_WIDTH_BY_HEADER.get(header, _MIN_WIDTH)] + [len(line[i]) for line in lines])
              for i, header in enumerate(headers)]
    return "\n".join(" ".join([cell.ljust(width) for cell, width in zip(line[:-1], widths)] + line[-1:])
                     for line in lines)


# --- dump-offsets -------------------------------------------------------------------

def _scala_option(text: str | None) -> str:
    return "None" if text is None else f"Some({text})"


def _member_text(member: MemberMetadata, protocol: str | None) -> str:
    return (f"MemberMetadata(memberId={member.member_id}, "
            f"groupInstanceId={_scala_option(member.group_instance_id)}, clientId={member.client_id}, "
            f"clientHost={member.client_host}, sessionTimeoutMs={member.session_timeout_ms}, "
            f"rebalanceTimeoutMs={member.rebalance_timeout_ms}, "
            f"supportedProtocols=List({'null' if protocol is None else protocol}))")


def format_offsets_record(key: OffsetKey | GroupKey, value: OffsetValue | GroupValue | None) -> str:
    """One `__consumer_offsets` record as Kafka 3.x's formatters print it (an offset
    commit as OffsetsMessageFormatter, a group as GroupMetadataMessageFormatter);
    "...::NULL" for a tombstone. A v3 offset value has no expire timestamp: None."""
    if isinstance(key, OffsetKey):
        head = f"[{key.group},{key.topic},{key.partition}]::"
        if value is None:
            return head + "NULL"
        epoch = f"Optional[{value.leader_epoch}]" if value.leader_epoch >= 0 else "Optional.empty"
        return (f"{head}OffsetAndMetadata(offset={value.offset}, leaderEpoch={epoch}, "
                f"metadata={'null' if value.metadata is None else value.metadata}, "
                f"commitTimestamp={value.commit_timestamp_ms}, expireTimestamp=None)")
    if type(key) in consumer_group_records.KEY_VERSIONS:
        return _consumer_group_record_json(key, value)
    if not isinstance(key, GroupKey):
        raise TypeError(f"not a __consumer_offsets key: {key!r}")
    if value is None:
        return f"{key.group}::NULL"
    members = ", ".join(f"{m.member_id} -> {_member_text(m, value.protocol)}" for m in value.members)
    return (f"{key.group}::GroupMetadata(groupId={key.group}, generation={value.generation}, "
            f"protocolType={_scala_option(value.protocol_type or None)}, "
            f"currentState={'Stable' if value.members else 'Empty'}, members=HashMap({members}))")


# rafka's field names where Kafka's schemas say otherwise
_KAFKA_FIELD_NAMES = {"group": "groupId", "name": "topicName", "partitions": "numPartitions",
                      "assigned": "assignedPartitions", "pending_revocation": "partitionsPendingRevocation",
                      "topics": "topics"}


def _consumer_group_record_json(key, value) -> str:
    """A consumer group record (KIP-848) as Kafka 4's GroupMetadataMessageFormatter
    prints it: {"key": {"type": N, "data": {...}}, "value": {"version": 0, "data":
    {...}}} (value null for a tombstone), fields in camelCase, topic ids as Kafka's
    Uuid strings, partitions as [{"topicId", "partitions"}]."""
    def camel(name: str) -> str:
        if name in _KAFKA_FIELD_NAMES:
            return _KAFKA_FIELD_NAMES[name]
        head, *rest = name.split("_")
        return head + "".join(part.capitalize() for part in rest)

    def plain(item):
        if isinstance(item, uuid.UUID):
            return uuid_as_id(item)
        if isinstance(item, consumer_group_records.TargetAssignmentMemberValue):
            return {"topicPartitions": plain(item.partitions)}
        if dataclasses.is_dataclass(item):
            return {camel(f.name): plain(getattr(item, f.name)) for f in dataclasses.fields(item)}
        if isinstance(item, tuple) and item and isinstance(item[0], tuple) and isinstance(item[0][0], uuid.UUID):
            return [{"topicId": uuid_as_id(topic_id), "partitions": list(parts)} for topic_id, parts in item]
        if isinstance(item, tuple):
            return [plain(x) for x in item]
        return item
    record = {"key": {"type": consumer_group_records.KEY_VERSIONS[type(key)], "data": plain(key)},
              "value": None if value is None else {"version": consumer_group_records.VALUE_VERSION,
                                                    "data": plain(value)}}
    return json.dumps(record, separators=(",", ":"))
