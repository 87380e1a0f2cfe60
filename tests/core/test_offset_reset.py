"""Offset resets and the text of Kafka's tools: java.time.Duration's grammar, KIP-1106's
auto.offset.reset, --reset-offsets planning, kafka-consumer-groups tables, dump-offsets lines."""

import pytest

from rafka.core.errors import UnknownTopicOrPartition
from rafka.core.offset_reset import (DESCRIBE_OFFSETS_HEADERS, RESET_OFFSETS_HEADERS, ByDuration, ShiftBy,
                                     ToCurrent, ToDatetime, ToEarliest, ToLatest, ToOffset, format_offsets_record,
                                     format_table, parse_auto_offset_reset, parse_datetime_ms,
                                     parse_iso_duration_ms, plan_reset)
from rafka.core.offsets_schema import (GroupKey, GroupValue, MemberMetadata, OffsetKey, OffsetValue, decode_key,
                                       decode_value, encode_key, encode_value)
from rafka.core.structs import TopicPartition

pytestmark = pytest.mark.core
HOUR_MS = 3_600_000

# --- durations ----------------------------------------------------------------------

# (text, Duration.parse(text).toMillis()); the signed examples are java.time.Duration's javadoc.
DURATIONS = [
    ("PT1H", HOUR_MS),
    ("P1DT2H", 26 * HOUR_MS),
    ("P2D", 48 * HOUR_MS),
    ("PT15M", 900_000),
    ("PT20.345S", 20_345),
    ("PT0.5S", 500),
    ("PT0,5S", 500),                  # a comma works as the decimal mark
    ("PT1.S", 1_000),                 # the fraction may have no digits
    ("PT1.123456789S", 1_123),
    ("pt1h", HOUR_MS),                # letters in either case
    ("p1dT2h", 26 * HOUR_MS),
    ("-PT1M", -60_000),
    ("+PT1M", 60_000),
    ("PT-6H3M", -6 * HOUR_MS + 180_000),
    ("-PT6H3M", -6 * HOUR_MS - 180_000),
    ("-PT-6H+3M", 6 * HOUR_MS - 180_000),
    ("PT-0.5S", -500),                # the fraction takes the seconds' sign
    ("PT0.0009S", 0),                 # below a millisecond truncates toward zero, as toMillis
    ("-PT0.0009S", 0),
    ("P0D", 0),
    ("PT9223372036854775.807S", 9_223_372_036_854_775_807),   # Long.MAX_VALUE ms, toMillis's limit
]


@pytest.mark.parametrize("text, millis", DURATIONS)
def test_duration__java_duration_parse_vectors(text, millis):
    assert parse_iso_duration_ms(text) == millis


@pytest.mark.parametrize("text", ["1H", "PT", "P", "", "P1H", "PT1D", "P1W", "P1Y", "PT1.5M", "PT.5S",
                                  "PT1.1234567890S", "P1DT", " PT1H", "PT1H ", "PT1\u017f",  # long s: ASCII only
                                  "P1D2H", "PT1H1H", "P106751991167301D", "PT9223372036854775808S",
                                  "P" + "9" * 5000 + "D"])
def test_duration__bad_text__value_error_naming_the_text(text):
    with pytest.raises(ValueError, match="^Text cannot be parsed to a Duration: ") as raised:
        parse_iso_duration_ms(text)
    assert repr(text) in str(raised.value)


@pytest.mark.parametrize("value, expected", [
    ("earliest", ("earliest", None)),
    ("latest", ("latest", None)),
    ("none", ("none", None)),
    ("by_duration:PT1H", ("by_duration", HOUR_MS)),
    ("by_duration:P2D", ("by_duration", 48 * HOUR_MS)),
    ("by_duration:PT0S", ("by_duration", 0)),
    ("by_duration:-PT0S", ("by_duration", 0)),      # zero is not negative
])
def test_auto_offset_reset__kip_1106_values(value, expected):
    assert parse_auto_offset_reset(value) == expected


@pytest.mark.parametrize("value, reason", [
    ("LATEST", "Unknown auto offset reset strategy."),    # names are lower case only, as Kafka's
    ("invalid", "Unknown auto offset reset strategy."),
    ("", "Unknown auto offset reset strategy."),
    (None, "Unknown auto offset reset strategy."),
    ("by_duration", "<:duration> part is missing in by_duration auto offset reset strategy."),
    ("by_duration:", "Unable to parse duration string in by_duration offset reset strategy."),
    ("by_duration:invalid", "Unable to parse duration string in by_duration offset reset strategy."),
    ("by_duration:-PT0.0001S", "Negative duration is not supported in by_duration offset reset strategy."),
])
def test_auto_offset_reset__refused__config_error_with_the_reason(value, reason):
    with pytest.raises(ValueError) as raised:
        parse_auto_offset_reset(value)
    assert str(raised.value).startswith(f"Invalid value {value} for configuration auto.offset.reset: {reason} ")


def test_auto_offset_reset__negative_duration__kafkas_config_message():
    with pytest.raises(ValueError) as raised:
        parse_auto_offset_reset("by_duration:-PT1H")
    assert str(raised.value) == (
        "Invalid value by_duration:-PT1H for configuration auto.offset.reset: Negative duration is not "
        "supported in by_duration offset reset strategy. The value must be either 'earliest', 'latest', "
        "'none' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


# --- --to-datetime ---------------------------------------------------------------------

@pytest.mark.parametrize("text, epoch_ms", [
    ("1970-01-01T00:00:00.000", 0),
    ("2024-01-02T03:04:05.678", 1_704_164_645_678),   # no zone: UTC, as Kafka's Utils.getDateTime
    ("2024-01-02T03:04:05.678Z", 1_704_164_645_678),
    ("1969-12-31T23:59:59.999Z", -1),
    ("2020-11-10T16:51:38.198+08:00", 1_604_998_298_198),   # Kafka's javadoc example, in each zone form
    ("2020-11-10T16:51:38.198+0800", 1_604_998_298_198),
    ("2020-11-10T16:51:38.198+08", 1_604_998_298_198),
    ("1970-01-01T00:00:00.000-05:30", 19_800_000),
])
def test_to_datetime__kafkas_formats(text, epoch_ms):
    assert parse_datetime_ms(text) == epoch_ms


@pytest.mark.parametrize("text", ["2024-01-02", "2024-01-02T03:04:05", "2024-01-02T03:04:05.5",
                                  "2024-01-02 03:04:05.678", "2024-13-01T00:00:00.000", "2024-02-30T00:00:00.000",
                                  "2024-01-02T24:00:00.000", "2024-01-02T03:04:05.678+24:00",
                                  "2024-01-02T03:04:05.678+01:75", "2024-01-02T03:04:05.678z", ""])
def test_to_datetime__bad_text__value_error_naming_the_text(text):
    with pytest.raises(ValueError, match="^Error parsing timestamp ") as raised:
        parse_datetime_ms(text)
    assert repr(text) in str(raised.value)


# --- --reset-offsets planning -------------------------------------------------------------

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
BEGINNING, END = {P0: 10, P1: 0}, {P0: 100, P1: 50}
# Record timestamps per offset: p0 holds offsets 10..99 at 1_000 ms apart from t=0; p1 is empty of late records.
TIMESTAMPS_MS = {P0: {offset: (offset - 10) * 1_000 for offset in range(10, 100)},
                 P1: {offset: offset for offset in range(0, 50)}}
asked: list = []


def offsets_for_time(tp, timestamp_ms):
    """The log's answer: the first offset whose timestamp is >= timestamp_ms, else None."""
    asked.append((tp, timestamp_ms))
    return next((o for o, ts in sorted(TIMESTAMPS_MS[tp].items()) if ts >= timestamp_ms), None)


def plan(spec, committed=None, partitions=(P0, P1), now_ms=0):
    return plan_reset(spec, partitions, committed=committed or {}, beginning=BEGINNING, end=END,
                      offsets_for_time=offsets_for_time, now_ms=now_ms)


def test_reset__to_earliest_and_to_latest__log_start_and_log_end():
    assert plan(ToEarliest()).offsets == {P0: 10, P1: 0}
    assert plan(ToLatest()).offsets == {P0: 100, P1: 50}
    assert plan(ToLatest()).warnings == ()


def test_reset__to_current__committed_offset__log_end_where_none_is_committed():
    result = plan(ToCurrent(), committed={P0: 40})
    assert result.offsets == {P0: 40, P1: 50} and result.warnings == ()


def test_reset__to_offset_above_log_end__clamped_with_kafkas_warning():
    result = plan(ToOffset(60))
    assert result.offsets == {P0: 60, P1: 50}
    assert result.warnings == ("New offset (60) is higher than latest offset for topic partition orders-1. "
                               "Value will be set to 50.",)


def test_reset__to_offset_below_log_start__clamped_with_kafkas_warning():
    result = plan(ToOffset(-5))
    assert result.offsets == {P0: 10, P1: 0}
    assert result.warnings == (
        "New offset (-5) is lower than earliest offset for topic partition orders-0. Value will be set to 10.",
        "New offset (-5) is lower than earliest offset for topic partition orders-1. Value will be set to 0.")


def test_reset__shift_by__from_committed__clamped_into_the_log():
    assert plan(ShiftBy(5), committed={P0: 40, P1: 30}).offsets == {P0: 45, P1: 35}
    result = plan(ShiftBy(-35), committed={P0: 40, P1: 30})
    assert result.offsets == {P0: 10, P1: 0} and len(result.warnings) == 2
    assert plan(ShiftBy(30), committed={P0: 40, P1: 30}).offsets == {P0: 70, P1: 50}


def test_reset__shift_by_without_committed_offset__refused_as_kafka():
    with pytest.raises(ValueError, match="^Cannot shift offset for partition orders-1 since there is no "
                                         "current committed offset$"):
        plan(ShiftBy(1), committed={P0: 40})


def test_reset__to_datetime__first_offset_at_or_after__log_end_when_none():
    result = plan(ToDatetime(5_500))
    assert result.offsets == {P0: 16, P1: 50}
    assert result.warnings == ("Partition 1 from topic orders is empty. Falling back to latest known offset.",)


def test_reset__by_duration__looks_up_now_minus_duration():
    asked.clear()
    now_ms = 80_000
    result = plan(ByDuration(30_000), now_ms=now_ms)
    assert asked == [(P0, 50_000), (P1, 50_000)]
    assert result.offsets == {P0: 60, P1: 50}


def test_reset__by_duration_negative__a_future_time__log_end_as_kafkas_tool():
    assert plan(ByDuration(-HOUR_MS), now_ms=0).offsets == {P0: 100, P1: 50}


def test_reset__to_datetime_without_offsets_for_time__type_error():
    with pytest.raises(TypeError):
        plan_reset(ToDatetime(0), [P0], committed={}, beginning=BEGINNING, end=END, now_ms=0)


def test_reset__unknown_partition__whole_plan_refused():
    with pytest.raises(UnknownTopicOrPartition, match='The partitions "orders-7,bills-0" do not exist'):
        plan(ToEarliest(), partitions=[P0, ("orders", 7), ("bills", 0)])


def test_reset__plain_tuples_and_caller_order__kept():
    result = plan(ToLatest(), partitions=[("orders", 1), ("orders", 0)])
    assert list(result.offsets.items()) == [(("orders", 1), 50), (("orders", 0), 100)]


# --- tables -------------------------------------------------------------------------------

def test_table__reset_offsets__kafkas_exact_layout():
    text = format_table(RESET_OFFSETS_HEADERS, [["billing", "orders", 0, 42], ["billing", "orders", 1, 7]])
    assert text == ("GROUP           TOPIC           PARTITION  NEW-OFFSET\n"
                    "billing         orders          0          42\n"
                    "billing         orders          1          7")


def test_table__describe__equals_kafkas_printf_format():
    rows = [["a-very-long-group-name", "orders", 0, 5, 9, 4, "consumer-1-4b2c9d7e-aaaa-bbbb", "/10.0.0.1",
             "consumer-1"],
            ["a-very-long-group-name", "orders", 1, None, 3, None, None, None, None]]
    # ConsumerGroupCommand's describe format: group, topic, consumer id and host widen to their widest cell.
    java_format = "%-22s %-15s %-10s %-15s %-15s %-15s %-29s %-15s %s"
    expected = [java_format % tuple(DESCRIBE_OFFSETS_HEADERS)]
    expected += [java_format % tuple("-" if cell is None else str(cell) for cell in row) for row in rows]
    assert format_table(DESCRIBE_OFFSETS_HEADERS, rows) == "\n".join(expected)


def test_table__cell_wider_than_kafkas_fixed_width__column_widens():
    text = format_table(["PARTITION", "LAG"], [[12345678901, 1]])
    assert text == "PARTITION   LAG\n12345678901 1"


def test_table__row_of_the_wrong_length__value_error():
    with pytest.raises(ValueError):
        format_table(RESET_OFFSETS_HEADERS, [["billing", "orders", 0]])


# --- dump-offsets ---------------------------------------------------------------------------

def test_dump_offsets__offset_commit__offsets_message_formatter_line():
    line = format_offsets_record(OffsetKey("billing", "orders", 2), OffsetValue(42, 3, "m", 1_700_000_000_000))
    assert line == ("[billing,orders,2]::OffsetAndMetadata(offset=42, leaderEpoch=Optional[3], metadata=m, "
                    "commitTimestamp=1700000000000, expireTimestamp=None)")


def test_dump_offsets__no_leader_epoch_no_metadata__optional_empty():
    line = format_offsets_record(OffsetKey("g", "t", 0), OffsetValue(7, -1, "", 5))
    assert line == ("[g,t,0]::OffsetAndMetadata(offset=7, leaderEpoch=Optional.empty, metadata=, "
                    "commitTimestamp=5, expireTimestamp=None)")


def test_dump_offsets__tombstones__null():
    assert format_offsets_record(OffsetKey("billing", "orders", 2), None) == "[billing,orders,2]::NULL"
    assert format_offsets_record(GroupKey("billing"), None) == "billing::NULL"


def test_dump_offsets__stable_group__group_metadata_message_formatter_line():
    members = (MemberMetadata("m-1", None, "client-1", "/127.0.0.1", 300_000, 10_000, b"s", b"a"),
               MemberMetadata("m-2", "inst-2", "client-2", "/127.0.0.2", 300_000, 45_000, b"s", b"a"))
    line = format_offsets_record(GroupKey("billing"), GroupValue("consumer", 3, "range", "m-1", 9, members))
    assert line == (
        "billing::GroupMetadata(groupId=billing, generation=3, protocolType=Some(consumer), currentState=Stable, "
        "members=HashMap("
        "m-1 -> MemberMetadata(memberId=m-1, groupInstanceId=None, clientId=client-1, clientHost=/127.0.0.1, "
        "sessionTimeoutMs=10000, rebalanceTimeoutMs=300000, supportedProtocols=List(range)), "
        "m-2 -> MemberMetadata(memberId=m-2, groupInstanceId=Some(inst-2), clientId=client-2, clientHost=/127.0.0.2, "
        "sessionTimeoutMs=45000, rebalanceTimeoutMs=300000, supportedProtocols=List(range))))")


def test_dump_offsets__empty_group__empty_state_and_no_members():
    line = format_offsets_record(GroupKey("billing"), GroupValue("consumer", 4, None, None, 9))
    assert line == ("billing::GroupMetadata(groupId=billing, generation=4, protocolType=Some(consumer), "
                    "currentState=Empty, members=HashMap())")
    blank_type = format_offsets_record(GroupKey("g"), GroupValue("", 0, None, None, -1))
    assert "protocolType=None" in blank_type


def test_dump_offsets__records_from_their_bytes__same_lines():
    for key, value in [(OffsetKey("billing", "orders", 2), OffsetValue(42, 3, "m", 1_700_000_000_000)),
                       (OffsetKey("billing", "orders", 2), None),
                       (GroupKey("billing"), GroupValue("consumer", 4, None, None, 9))]:
        decoded_key = decode_key(encode_key(key))
        decoded_value = decode_value(decoded_key, encode_value(value))
        assert format_offsets_record(decoded_key, decoded_value) == format_offsets_record(key, value)
