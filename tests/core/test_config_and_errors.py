import pickle

import pytest

from rafka.core.config import TopicConfig
from rafka.core.errors import (ERRORS_BY_CODE, InvalidConfig, NotLeaderOrFollower, RecordTooLarge,
                               KafkaError)

pytestmark = pytest.mark.core


def test_topic_config__defaults_are_kafkas():
    config = TopicConfig.from_dict({})
    assert config.segment_bytes == 1_073_741_824
    assert config.retention_ms == 604_800_000
    assert config.retention_bytes == -1
    assert config.cleanup_policy == ("delete",)
    assert config.max_message_bytes == 1_048_588
    assert config.min_insync_replicas == 1
    assert config.unclean_leader_election_enable is False


def test_topic_config__strings_are_parsed_like_kafka_topics_config():
    config = TopicConfig.from_dict({"segment.bytes": "1024", "cleanup.policy": "compact",
                                    "min.insync.replicas": 2})
    assert (config.segment_bytes, config.cleanup_policy, config.min_insync_replicas) == (1024, ("compact",), 2)
    assert config.to_dict()["segment.bytes"] == 1024


@pytest.mark.parametrize("overrides, message", [
    ({"segment.byte": "1"}, "Unknown topic config name(s): segment.byte"),
    ({"segment.bytes": "10"}, "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ({"cleanup.policy": "shred"}, "Invalid value shred for configuration cleanup.policy: "
                                  "String must be one of: compact, delete"),
    ({"min.insync.replicas": 0}, "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
])
def test_topic_config__bad_name_or_value__invalid_config(overrides, message):
    with pytest.raises(InvalidConfig) as raised:
        TopicConfig.from_dict(overrides)
    assert raised.value.message == message
    assert raised.value.kafka_name == "INVALID_CONFIG" and not raised.value.retriable


def test_errors__know_code_name_and_retriable_and_survive_pickling():
    error = pickle.loads(pickle.dumps(NotLeaderOrFollower("replica 2 is a follower")))
    assert (error.code, error.kafka_name, error.retriable) == (6, "NOT_LEADER_OR_FOLLOWER", True)
    assert error.message == "replica 2 is a follower"
    assert ERRORS_BY_CODE[10] is RecordTooLarge and not RecordTooLarge.retriable
    assert all(issubclass(cls, KafkaError) for cls in ERRORS_BY_CODE.values())
