"""Topic configs as Kafka 4.x's LogConfig defines them: every name accepted with
its default, each value refused where Kafka's ConfigDef refuses it (type, range,
valid values), with Kafka's wording, and nothing built when any entry is bad."""

import pytest

from rafka.core.config import TopicConfig
from rafka.core.errors import InvalidConfig

pytestmark = pytest.mark.core

LONG_MAX = 2**63 - 1

# Every topic config Kafka 4.x defines (LogConfig / TopicConfig / QuotaConfig), with its default.
KAFKA_TOPIC_CONFIG_DEFAULTS = {
    "cleanup.policy": ("delete",),
    "compression.gzip.level": -1,
    "compression.lz4.level": 9,
    "compression.type": "producer",
    "compression.zstd.level": 3,
    "delete.retention.ms": 86_400_000,
    "file.delete.delay.ms": 60_000,
    "flush.messages": LONG_MAX,
    "flush.ms": LONG_MAX,
    "follower.replication.throttled.replicas": (),
    "index.interval.bytes": 4096,
    "leader.replication.throttled.replicas": (),
    "local.retention.bytes": -2,
    "local.retention.ms": -2,
    "max.compaction.lag.ms": LONG_MAX,
    "max.message.bytes": 1_048_588,
    "message.timestamp.after.max.ms": 3_600_000,
    "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "min.insync.replicas": 1,
    "preallocate": False,
    "remote.log.copy.disable": False,
    "remote.log.delete.on.disable": False,
    "remote.storage.enable": False,
    "retention.bytes": -1,
    "retention.ms": 604_800_000,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "segment.jitter.ms": 0,
    "segment.ms": 604_800_000,
    "unclean.leader.election.enable": False,
}


def test_topic_configs__every_kafka_name_is_known_with_kafkas_default():
    assert TopicConfig.from_dict({}).to_dict() == KAFKA_TOPIC_CONFIG_DEFAULTS


# (name, value given, value kept): accepted as Kafka's ConfigDef accepts them.
ACCEPTED = [
    ("min.cleanable.dirty.ratio", "0.01", 0.01),
    ("min.cleanable.dirty.ratio", "0", 0.0),
    ("min.cleanable.dirty.ratio", "1", 1.0),
    ("min.cleanable.dirty.ratio", " .75 ", 0.75),
    ("min.cleanable.dirty.ratio", 0.2, 0.2),
    ("max.compaction.lag.ms", "1", 1),
    ("max.compaction.lag.ms", str(LONG_MAX), LONG_MAX),
    ("file.delete.delay.ms", "0", 0),
    ("cleanup.policy", "compact,delete", ("compact", "delete")),
    ("cleanup.policy", "delete , compact", ("delete", "compact")),
    ("cleanup.policy", "compact", ("compact",)),
    ("cleanup.policy", "", ()),
    ("cleanup.policy", ["compact", "delete"], ("compact", "delete")),
    ("compression.type", "zstd", "zstd"),
    ("compression.type", "uncompressed", "uncompressed"),
    ("compression.gzip.level", "-1", -1),
    ("compression.gzip.level", "9", 9),
    ("compression.lz4.level", "17", 17),
    ("compression.zstd.level", "-131072", -131072),
    ("compression.zstd.level", "22", 22),
    ("flush.messages", "1", 1),
    ("flush.ms", "0", 0),
    ("follower.replication.throttled.replicas", "0:1, 1:2", ("0:1", "1:2")),
    ("leader.replication.throttled.replicas", "*", ("*",)),
    ("local.retention.ms", "-2", -2),
    ("local.retention.bytes", "1000", 1000),
    ("message.timestamp.after.max.ms", "0", 0),
    ("message.timestamp.before.max.ms", "86400000", 86_400_000),
    ("preallocate", "TRUE", True),
    ("remote.storage.enable", "false", False),
    ("remote.log.copy.disable", "true", True),
    ("remote.log.delete.on.disable", "true", True),
    ("retention.bytes", "-5", -5),
    ("segment.jitter.ms", "0", 0),
    ("segment.index.bytes", "4", 4),
    ("segment.ms", "+60000", 60_000),
    ("unclean.leader.election.enable", "false", False),
]


@pytest.mark.parametrize("name, given, kept", ACCEPTED, ids=[f"{n}={g!r}" for n, g, _ in ACCEPTED])
def test_topic_config__value_kafka_accepts__kept_typed(name, given, kept):
    config = TopicConfig.from_dict({name: given})
    assert config.to_dict()[name] == kept
    assert type(config.to_dict()[name]) is type(kept)


# (name, value given, InvalidConfig message): refused where Kafka refuses, in Kafka's words.
REFUSED = [
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
                                         "Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: "
                                          "Value must be at least 0"),
    ("min.cleanable.dirty.ratio", "half", "Invalid value half for configuration min.cleanable.dirty.ratio: "
                                          "Not a number of type DOUBLE"),
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"),
    ("max.compaction.lag.ms", "1.5", "Invalid value 1.5 for configuration max.compaction.lag.ms: "
                                     "Not a number of type LONG"),
    ("max.compaction.lag.ms", str(LONG_MAX + 1), f"Invalid value {LONG_MAX + 1} for configuration "
                                                 f"max.compaction.lag.ms: Not a number of type LONG"),
    ("file.delete.delay.ms", "-1", "Invalid value -1 for configuration file.delete.delay.ms: Value must be at least 0"),
    ("cleanup.policy", "shred", "Invalid value shred for configuration cleanup.policy: "
                                "String must be one of: compact, delete"),
    ("cleanup.policy", "compact,Delete", "Invalid value Delete for configuration cleanup.policy: "
                                         "String must be one of: compact, delete"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: "
                                   "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: "
                                    "Value must be between 1 and 9 or equal to -1"),
    ("compression.lz4.level", "18", "Invalid value 18 for configuration compression.lz4.level: "
                                    "Value must be no more than 17"),
    ("compression.zstd.level", "23", "Invalid value 23 for configuration compression.zstd.level: "
                                     "Value must be no more than 22"),
    ("flush.messages", "0", "Invalid value 0 for configuration flush.messages: Value must be at least 1"),
    ("follower.replication.throttled.replicas", "0-1", (
        "Invalid value [0-1] for configuration follower.replication.throttled.replicas: "
        "follower.replication.throttled.replicas must be the literal '*' or a list of replicas in the following "
        "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")),
    ("local.retention.ms", "-3", "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"),
    ("message.timestamp.after.max.ms", "-1", "Invalid value -1 for configuration message.timestamp.after.max.ms: "
                                             "Value must be at least 0"),
    ("message.timestamp.type", "createtime", "Invalid value createtime for configuration message.timestamp.type: "
                                             "String must be one of: CreateTime, LogAppendTime"),
    ("min.insync.replicas", "0", "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ("min.insync.replicas", str(2**31), f"Invalid value {2**31} for configuration min.insync.replicas: "
                                        f"Not a number of type INT"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: "
                           "Expected value to be either true or false"),
    ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "1_000", "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("segment.bytes", "10", "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ("segment.index.bytes", "3", "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4"),
    ("segment.jitter.ms", "-1", "Invalid value -1 for configuration segment.jitter.ms: Value must be at least 0"),
    ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker. "
                                      "Topic cannot be configured with remote log storage."),
    ("unclean.leader.election.enable", "true", "Invalid value true for configuration unclean.leader.election.enable: "
                                               "rafka never elects an out-of-sync replica; only false is accepted"),
]


@pytest.mark.parametrize("name, given, message", REFUSED, ids=[f"{n}={g!r}" for n, g, _ in REFUSED])
def test_topic_config__value_kafka_refuses__invalid_config_in_kafkas_words(name, given, message):
    with pytest.raises(InvalidConfig) as raised:
        TopicConfig.from_dict({name: given})
    assert raised.value.message == message


def test_topic_config__min_compaction_lag_above_max__conflict_refused():
    with pytest.raises(InvalidConfig) as raised:
        TopicConfig.from_dict({"min.compaction.lag.ms": "200", "max.compaction.lag.ms": "100"})
    assert raised.value.message == ("conflict topic config setting min.compaction.lag.ms (200) > "
                                    "max.compaction.lag.ms (100)")


def test_topic_config__the_names_librdkafka_sets__accepted_together():
    config = TopicConfig.from_dict({"min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "5000",
                                    "file.delete.delay.ms": "1000", "cleanup.policy": "compact,delete"})
    assert (config.min_cleanable_dirty_ratio, config.max_compaction_lag_ms, config.file_delete_delay_ms) == (
        0.01, 5000, 1000)
    assert config.compacted and config.deletes_by_retention


def test_topic_config__one_bad_entry__nothing_built_and_unknown_names_listed():
    with pytest.raises(InvalidConfig) as raised:
        TopicConfig.from_dict({"min.cleanable.dirty.ratio": "0.2", "segment.byte": "1", "retention.msec": "1"})
    assert raised.value.message == "Unknown topic config name(s): retention.msec, segment.byte"


@pytest.mark.parametrize("policy, compacted, deleted", [
    ("delete", False, True), ("compact", True, False), ("compact,delete", True, True), ("", False, False)])
def test_topic_config__cleanup_policy_list__compacts_and_or_deletes(policy, compacted, deleted):
    config = TopicConfig.from_dict({"cleanup.policy": policy})
    assert (config.compacted, config.deletes_by_retention) == (compacted, deleted)


def test_topic_config__max_segment_ms__a_compacted_topic_rolls_by_max_compaction_lag():
    assert TopicConfig.from_dict({"cleanup.policy": "compact", "segment.ms": "60000",
                                  "max.compaction.lag.ms": "5000"}).max_segment_ms == 5000
    assert TopicConfig.from_dict({"cleanup.policy": "delete", "segment.ms": "60000",
                                  "max.compaction.lag.ms": "5000"}).max_segment_ms == 60_000
