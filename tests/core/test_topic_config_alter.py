"""Altering a topic's configs after creation, as Kafka's controller merges and
validates IncrementalAlterConfigs and AlterConfigs (core.config.altered_overrides,
core.metadata.handle_alter_topic_config), and what an altered replica does from
its next append or check on (PartitionLog / PartitionReplica.reconfigure)."""

import random

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import APPEND, DELETE, SET, SUBTRACT, TopicConfig, altered_overrides
from rafka.core.errors import (InvalidConfig, InvalidRecord, InvalidRequest, InvalidTopic, NotEnoughReplicas,
                               RecordTooLarge, UnknownTopicOrPartition)
from rafka.core.log import PartitionLog
from rafka.core.metadata import ClusterMetadata
from rafka.core.replica import ACKS_ALL, ACKS_LEADER, PartitionReplica

from tests.core.helpers import batch, keyed_batch
from tests.core.test_log import read_all

pytestmark = pytest.mark.core
NOW_MS = 1_700_000_000_000

# --- the operations, merged (ConfigurationControlManager.incrementalAlterConfigResource) ---

# (the topic's overrides, the operations, the overrides after them)
MERGES = [
    pytest.param({}, [(SET, "retention.ms", "1000")], {"retention.ms": "1000"}, id="set-new"),
    pytest.param({"retention.ms": "1000"}, [(SET, "retention.ms", "2000")], {"retention.ms": "2000"},
                 id="set-replaces"),
    pytest.param({"retention.ms": "1000", "segment.ms": "60000"}, [(DELETE, "retention.ms", None)],
                 {"segment.ms": "60000"}, id="delete-back-to-default"),
    pytest.param({}, [(DELETE, "retention.ms", None)], {}, id="delete-not-set-nothing"),
    pytest.param({}, [(APPEND, "cleanup.policy", "compact")], {"cleanup.policy": "delete,compact"},
                 id="append-to-the-default"),
    pytest.param({"cleanup.policy": "compact"}, [(APPEND, "cleanup.policy", "compact")],
                 {"cleanup.policy": "compact"}, id="append-present-kept-once"),
    pytest.param({"cleanup.policy": "compact"}, [(APPEND, "cleanup.policy", "delete,compact")],
                 {"cleanup.policy": "compact,delete"}, id="append-several"),
    pytest.param({"cleanup.policy": "delete,compact"}, [(SUBTRACT, "cleanup.policy", "compact")],
                 {"cleanup.policy": "delete"}, id="subtract"),
    pytest.param({}, [(SUBTRACT, "cleanup.policy", "delete")], {"cleanup.policy": ""},
                 id="subtract-the-default-leaves-none"),
    pytest.param({}, [(SUBTRACT, "cleanup.policy", "compact")], {"cleanup.policy": "delete"},
                 id="subtract-absent-nothing-removed"),
    pytest.param({"cleanup.policy": ("compact", "delete")}, [(SUBTRACT, "cleanup.policy", "delete")],
                 {"cleanup.policy": "compact"}, id="subtract-from-a-typed-override"),
    pytest.param({}, [(SET, "retention.ms", "1000"), (APPEND, "cleanup.policy", "compact")],
                 {"retention.ms": "1000", "cleanup.policy": "delete,compact"}, id="several-in-order"),
]


@pytest.mark.parametrize("current, ops, expected", MERGES)
def test_alter_ops__merged_into_the_overrides_as_kafkas_controller(current, ops, expected):
    assert altered_overrides(current, ops) == expected
    TopicConfig.from_dict(expected)   # every merge above is a valid topic


# (the operations, the error, Kafka's message)
REFUSED_OPS = [
    pytest.param([(APPEND, "retention.ms", "5")], InvalidConfig,
                 "Can't APPEND to key retention.ms because its type is not LIST.", id="append-not-a-list"),
    pytest.param([(SUBTRACT, "min.insync.replicas", "1")], InvalidConfig,
                 "Can't SUBTRACT to key min.insync.replicas because its type is not LIST.", id="subtract-not-a-list"),
    pytest.param([(APPEND, "no.such.config", "x")], InvalidConfig,
                 "Can't APPEND to key no.such.config because its type is not LIST.", id="append-unknown-name"),
    pytest.param([(SET, "retention.ms", "1"), (DELETE, "retention.ms", None)], InvalidRequest,
                 "Error due to duplicate config keys", id="a-name-twice"),
    pytest.param([(SET, "retention.ms", None), (APPEND, "cleanup.policy", None)], InvalidRequest,
                 "Null value not supported for : retention.ms, cleanup.policy", id="null-values"),
    pytest.param([(7, "retention.ms", "1")], InvalidRequest, "Unknown operations type 7", id="unknown-operation"),
]


@pytest.mark.parametrize("ops, error, message", REFUSED_OPS)
def test_alter_ops__refused_as_kafka_refuses_them(ops, error, message):
    with pytest.raises(error) as refused:
        altered_overrides({"cleanup.policy": "compact"}, ops)
    assert refused.value.message == message


# --- the controller's metadata: validate, record, replay ---------------------------

def metadata_with(name="events", replication_factor=3, config=None):
    metadata = ClusterMetadata()
    for record in metadata.handle_start():
        metadata.replay(record)
    records, _ = metadata.handle_create_topic(name, 2, replication_factor, config, [0, 1, 2], rng=random.Random(0))
    for record in records:
        metadata.replay(record)
    return metadata


def test_alter_topic_config__append_compact__a_record_that_replays_to_the_new_overrides():
    metadata = metadata_with(config={"retention.ms": "60000"})
    records, overrides = metadata.handle_alter_topic_config("events", [(APPEND, "cleanup.policy", "compact")])
    assert overrides == {"retention.ms": "60000", "cleanup.policy": "delete,compact"}
    assert records == [{"type": "topic_config", "name": "events", "config": overrides}]
    assert metadata.topic("events").config == {"retention.ms": "60000"}   # a handler changes nothing
    metadata.replay(records[0])
    assert metadata.topic("events").config == overrides
    assert TopicConfig.from_dict(metadata.topic("events").config).compacted


def test_alter_topic_config__validate_only__the_caller_commits_nothing_and_nothing_changes():
    """validate_only is the controller not committing the records: the handler
    itself never changes the metadata, whatever it answers."""
    metadata = metadata_with()
    records, overrides = metadata.handle_alter_topic_config("events", [(SET, "retention.ms", "1000")])
    assert records and overrides == {"retention.ms": "1000"}
    assert metadata.topic("events").config == {}


def test_alter_topic_config__same_values__no_record():
    metadata = metadata_with(config={"cleanup.policy": "compact"})
    assert metadata.handle_alter_topic_config("events", [(APPEND, "cleanup.policy", "compact")])[0] == []
    assert metadata.handle_alter_topic_config("events", [(DELETE, "segment.ms", None)])[0] == []


def test_alter_configs_legacy__replaces_every_override():
    metadata = metadata_with(config={"retention.ms": "60000", "cleanup.policy": "compact"})
    records, overrides = metadata.handle_alter_topic_config("events", [(SET, "segment.ms", "1000")], replace=True)
    assert overrides == {"segment.ms": "1000"}
    metadata.replay(records[0])
    assert metadata.topic("events").config == {"segment.ms": "1000"}
    records, overrides = metadata.handle_alter_topic_config("events", [], replace=True)
    assert overrides == {} and records == [{"type": "topic_config", "name": "events", "config": {}}]


# (the operations, the error, the message: core.config's wording)
REFUSED_VALUES = [
    pytest.param([(SET, "retention.ms", "soon")], InvalidConfig,
                 "Invalid value soon for configuration retention.ms: Not a number of type LONG", id="not-a-number"),
    pytest.param([(SET, "min.cleanable.dirty.ratio", "2")], InvalidConfig,
                 "Invalid value 2.0 for configuration min.cleanable.dirty.ratio: Value must be no more than 1",
                 id="out-of-range"),
    pytest.param([(APPEND, "cleanup.policy", "shred")], InvalidConfig,
                 "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete",
                 id="append-a-bad-element"),
    pytest.param([(SET, "no.such.config", "1")], InvalidConfig, "Unknown topic config name(s): no.such.config",
                 id="unknown-name"),
    pytest.param([(SET, "min.insync.replicas", "4")], InvalidConfig,
                 "min.insync.replicas (4) is larger than the replication factor (3).", id="min-isr-above-rf"),
    pytest.param([(SET, "unclean.leader.election.enable", "true")], InvalidConfig,
                 "Invalid value true for configuration unclean.leader.election.enable: rafka never elects an "
                 "out-of-sync replica; only false is accepted", id="unclean-election"),
]


@pytest.mark.parametrize("ops, error, message", REFUSED_VALUES)
def test_alter_topic_config__bad_values__refused_and_nothing_changes(ops, error, message):
    metadata = metadata_with(config={"retention.ms": "60000"})
    with pytest.raises(error) as refused:
        metadata.handle_alter_topic_config("events", ops)
    assert refused.value.message == message
    assert metadata.topic("events").config == {"retention.ms": "60000"}


def test_alter_topic_config__unknown_topic__configs_checked_first_then_unknown_topic():
    """Kafka's controller validates the configs, then checks the topic exists."""
    metadata = metadata_with()
    with pytest.raises(InvalidConfig):
        metadata.handle_alter_topic_config("missing", [(SET, "retention.ms", "soon")])
    with pytest.raises(UnknownTopicOrPartition) as refused:
        metadata.handle_alter_topic_config("missing", [(SET, "retention.ms", "1000")])
    assert refused.value.message == "The topic 'missing' does not exist."


def test_alter_topic_config__empty_or_illegal_name__invalid_request_or_invalid_topic():
    metadata = metadata_with()
    with pytest.raises(InvalidRequest, match="Default topic resources are not allowed."):
        metadata.handle_alter_topic_config("", [(SET, "retention.ms", "1000")])
    with pytest.raises(InvalidTopic):
        metadata.handle_alter_topic_config("bad name!", [(SET, "retention.ms", "1000")])


def test_alter_topic_config__offsets_topic__altered_as_kafka_allows():
    metadata = metadata_with(name="__consumer_offsets", config={"cleanup.policy": "compact"})
    records, overrides = metadata.handle_alter_topic_config("__consumer_offsets", [(SET, "segment.bytes", "1048576")])
    assert overrides == {"cleanup.policy": "compact", "segment.bytes": "1048576"} and records


# --- a reconfigured log and replica ------------------------------------------------

def test_reconfigured_log__compact_appended__keyless_refused__subtracted__accepted(tmp_path):
    log = PartitionLog(tmp_path / "events-0", TopicConfig.from_dict({}), FakeClock(NOW_MS))
    log.append_as_leader(batch(b"before", key=None), leader_epoch=0)
    log.reconfigure(TopicConfig.from_dict(altered_overrides({}, [(APPEND, "cleanup.policy", "compact")])))
    with pytest.raises(InvalidRecord) as refused:
        log.append_as_leader(batch(b"keyless", key=None), leader_epoch=0)
    assert refused.value.record_errors == (
        (0, "Compacted topic cannot accept message without key in topic partition events-0"),)
    log.append_as_leader(batch(b"keyed", key=b"k"), leader_epoch=0)
    log.reconfigure(TopicConfig.from_dict({"cleanup.policy": "delete"}))
    log.append_as_leader(batch(b"keyless again", key=None), leader_epoch=0)
    assert [r.value for r in read_all(log)] == [b"before", b"keyed", b"keyless again"]


def test_reconfigured_log__retention_ms_lowered__old_segments_deleted_at_the_next_check(tmp_path):
    clock = FakeClock(NOW_MS)
    log = PartitionLog(tmp_path, TopicConfig.from_dict({"segment.bytes": "100"}), clock)
    for i in range(4):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=NOW_MS), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    clock.advance(120_000)
    assert log.enforce_retention() == 0                 # 7 days by default
    log.reconfigure(TopicConfig.from_dict({"segment.bytes": "100", "retention.ms": "60000"}))
    assert log.enforce_retention() > 0 and log.log_start_offset > 0


def test_reconfigured_log__compact_appended__the_cleaner_compacts_and_drops_keyless_records(tmp_path):
    """Kafka's cleaner keeps the newest record per key and discards records with
    no key (written before the topic was compacted)."""
    clock = FakeClock(NOW_MS)
    log = PartitionLog(tmp_path, TopicConfig.from_dict({"segment.bytes": "100"}), clock)
    assert log.plan_compaction() is None
    for key, value in [(None, b"keyless"), (b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"c", b"1")]:
        log.append_as_leader(keyed_batch([(key, value)], timestamp_ms=NOW_MS), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.reconfigure(TopicConfig.from_dict({"segment.bytes": "100", "cleanup.policy": "compact"}))
    plan = log.plan_compaction()
    assert plan is not None
    log.apply_compaction(plan, log.clean(plan))
    kept = [(r.key, r.value) for r in read_all(log)]
    assert (None, b"keyless") not in kept and (b"a", b"1") not in kept and (b"a", b"2") in kept


def test_reconfigured_log__max_message_bytes_and_segment_bytes__from_the_next_append(tmp_path):
    log = PartitionLog(tmp_path, TopicConfig.from_dict({}), FakeClock(NOW_MS))
    big = batch(b"x" * 500)
    log.append_as_leader(big, leader_epoch=0)
    log.reconfigure(TopicConfig.from_dict({"max.message.bytes": "200", "segment.bytes": "600"}))
    with pytest.raises(RecordTooLarge):
        log.append_as_leader(big, leader_epoch=0)
    log.append_as_leader(batch(b"small"), leader_epoch=0)
    log.append_as_leader(batch(b"small"), leader_epoch=0)
    assert len(log.segment_base_offsets()) == 2          # the first segment rolled at the new segment.bytes


def test_reconfigured_replica__min_insync_raised__acks_all_refused_and_lowered_again__accepted(tmp_path):
    clock = FakeClock(NOW_MS)
    leader = PartitionReplica(topic="events", partition=0, replica_id=0, directory=tmp_path / "events-0",
                              config=TopicConfig.from_dict({}), clock=clock, replica_lag_time_max_ms=30_000)
    leader.become_leader(leader_epoch=0, replicas=[0, 1, 2], isr=[0], partition_epoch=0)
    leader.append(batch(b"one"), acks=ACKS_ALL)
    leader.reconfigure(TopicConfig.from_dict({"min.insync.replicas": "2"}))
    assert leader.config.min_insync_replicas == 2 and leader.log.config is leader.config
    with pytest.raises(NotEnoughReplicas):
        leader.append(batch(b"two"), acks=ACKS_ALL)
    leader.append(batch(b"acks=1 still goes"), acks=ACKS_LEADER)
    leader.reconfigure(TopicConfig.from_dict(altered_overrides({"min.insync.replicas": "2"},
                                                               [(DELETE, "min.insync.replicas", None)])))
    leader.append(batch(b"three"), acks=ACKS_ALL)


def test_reconfigured_replica__cleanup_policy__keyless_produce_refused_then_accepted(tmp_path):
    leader = PartitionReplica(topic="events", partition=0, replica_id=0, directory=tmp_path / "events-0",
                              config=TopicConfig.from_dict({}), clock=FakeClock(NOW_MS),
                              replica_lag_time_max_ms=30_000)
    leader.become_leader(leader_epoch=0, replicas=[0], isr=[0], partition_epoch=0)
    compacted = altered_overrides({}, [(APPEND, "cleanup.policy", "compact")])
    leader.reconfigure(TopicConfig.from_dict(compacted))
    with pytest.raises(InvalidRecord):
        leader.append(batch(b"keyless", key=None), acks=ACKS_ALL)
    leader.append(batch(b"keyed", key=b"k"), acks=ACKS_ALL)
    leader.reconfigure(TopicConfig.from_dict(altered_overrides(compacted, [(SUBTRACT, "cleanup.policy", "compact")])))
    assert leader.append(batch(b"keyless", key=None), acks=ACKS_ALL).base_offset == 1
