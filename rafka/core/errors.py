"""Typed errors, one class per Kafka error code.

Each class knows its Kafka code, its Kafka name and whether a client may retry the
request that produced it. Errors cross Ray actor boundaries by pickling, so they
carry only a message string. Programmer bugs are not KafkaErrors: they fail loudly
as ordinary exceptions.
"""

from __future__ import annotations


class KafkaError(Exception):
    """Base of every error that names a Kafka error code."""

    code: int = -1
    kafka_name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.kafka_name)
        self.message = message or self.kafka_name

    def __reduce__(self):
        return (type(self), (self.message,))

    def __str__(self) -> str:
        return f"{self.kafka_name}: {self.message}" if self.message != self.kafka_name else self.kafka_name


def _error(name: str, code: int, kafka_name: str, retriable: bool, doc: str) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code, "kafka_name": kafka_name,
                                      "retriable": retriable, "__doc__": doc})


UnknownServerError = _error("UnknownServerError", -1, "UNKNOWN_SERVER_ERROR", False,
                            "An unexpected error on the server side.")
OffsetOutOfRange = _error("OffsetOutOfRange", 1, "OFFSET_OUT_OF_RANGE", False,
                          "The offset is below the log start offset or above the log end offset.")
CorruptRecord = _error("CorruptRecord", 2, "CORRUPT_MESSAGE", True,
                       "A record batch failed its CRC or framing check.")


class CorruptCoordinatorRecord(CorruptRecord):
    """A record of a coordinator's internal topic (`__consumer_offsets`,
    `__transaction_state`) that does
    not decode by its schema: an unknown version, a short buffer, trailing bytes,
    text that is not UTF-8, no key. Kafka's CorruptRecordException (CORRUPT_MESSAGE)
    is retriable, for a batch damaged on its way; these bytes are what the log
    holds, so no retry reads anything else: not retriable. Kafka's coordinator
    loader fails the partition's load on such a record ("Deserializing record ...
    failed"), as rafka's does (actors.coordinator_load)."""

    retriable = False


UnknownTopicOrPartition = _error("UnknownTopicOrPartition", 3, "UNKNOWN_TOPIC_OR_PARTITION", True,
                                 "The topic or partition does not exist.")
LeaderNotAvailable = _error("LeaderNotAvailable", 5, "LEADER_NOT_AVAILABLE", True,
                            "The partition has no leader right now (election in progress).")
NotLeaderOrFollower = _error("NotLeaderOrFollower", 6, "NOT_LEADER_OR_FOLLOWER", True,
                             "This replica is not the leader (or a follower) of the partition.")
RequestTimedOut = _error("RequestTimedOut", 7, "REQUEST_TIMED_OUT", True,
                         "The request did not complete in time.")
BrokerNotAvailable = _error("BrokerNotAvailable", 8, "BROKER_NOT_AVAILABLE", False,
                            "The broker is not available (no live broker has this id).")
RecordTooLarge = _error("RecordTooLarge", 10, "MESSAGE_TOO_LARGE", False,
                        "A record batch is larger than max.message.bytes.")
NetworkException = _error("NetworkException", 13, "NETWORK_EXCEPTION", True,
                          "The connection to the server was lost, or a response was unreadable or late.")
OffsetMetadataTooLarge = _error("OffsetMetadataTooLarge", 12, "OFFSET_METADATA_TOO_LARGE", False,
                                "Offset commit metadata is longer than offset.metadata.max.bytes.")
CoordinatorLoadInProgress = _error("CoordinatorLoadInProgress", 14, "COORDINATOR_LOAD_IN_PROGRESS", True,
                                   "The coordinator is still loading its offsets partition.")
CoordinatorNotAvailable = _error("CoordinatorNotAvailable", 15, "COORDINATOR_NOT_AVAILABLE", True,
                                 "The group coordinator is not available.")
NotCoordinator = _error("NotCoordinator", 16, "NOT_COORDINATOR", True,
                        "This coordinator does not own the group.")
InvalidTopic = _error("InvalidTopic", 17, "INVALID_TOPIC_EXCEPTION", False,
                      "The topic name is not valid.")
RecordListTooLarge = _error("RecordListTooLarge", 18, "RECORD_LIST_TOO_LARGE", False,
                            "The request holds more record bytes than the segment size.")
NotEnoughReplicas = _error("NotEnoughReplicas", 19, "NOT_ENOUGH_REPLICAS", True,
                           "The ISR is smaller than min.insync.replicas.")
NotEnoughReplicasAfterAppend = _error("NotEnoughReplicasAfterAppend", 20,
                                      "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True,
                                      "Appended, but the ISR shrank below min.insync.replicas.")
InvalidRequiredAcks = _error("InvalidRequiredAcks", 21, "INVALID_REQUIRED_ACKS", False,
                             "acks must be 0, 1 or all (-1).")
IllegalGeneration = _error("IllegalGeneration", 22, "ILLEGAL_GENERATION", False,
                           "The member's generation is not the group's current one.")
InconsistentGroupProtocol = _error("InconsistentGroupProtocol", 23, "INCONSISTENT_GROUP_PROTOCOL", False,
                                   "The member's protocol type or assignors do not match the group's.")
UnknownMemberId = _error("UnknownMemberId", 25, "UNKNOWN_MEMBER_ID", False,
                         "The member id is not in the group.")
InvalidSessionTimeout = _error("InvalidSessionTimeout", 26, "INVALID_SESSION_TIMEOUT", False,
                               "session.timeout.ms is outside the coordinator's allowed range.")
RebalanceInProgress = _error("RebalanceInProgress", 27, "REBALANCE_IN_PROGRESS", False,
                             "The group is rebalancing.")
UnsupportedVersion = _error("UnsupportedVersion", 35, "UNSUPPORTED_VERSION", False,
                            "The version of the API is not supported.")
UnsupportedForMessageFormat = _error("UnsupportedForMessageFormat", 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False,
                                     "The message format version on the broker does not support the request.")
OperationNotAttempted = _error("OperationNotAttempted", 55, "OPERATION_NOT_ATTEMPTED", False,
                               "Not attempted: another part of the same request failed.")
TopicAlreadyExists = _error("TopicAlreadyExists", 36, "TOPIC_ALREADY_EXISTS", False,
                            "A topic with this name exists.")
InvalidPartitions = _error("InvalidPartitions", 37, "INVALID_PARTITIONS", False,
                           "The number of partitions is not valid.")
InvalidReplicationFactor = _error("InvalidReplicationFactor", 38, "INVALID_REPLICATION_FACTOR", False,
                                  "The replication factor is not valid (or above the live nodes).")
InvalidConfig = _error("InvalidConfig", 40, "INVALID_CONFIG", False,
                       "A config name is unknown or its value is not valid.")
OutOfOrderSequence = _error("OutOfOrderSequence", 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False,
                            "An idempotent producer's sequence number skipped ahead.")
DuplicateSequence = _error("DuplicateSequence", 46, "DUPLICATE_SEQUENCE_NUMBER", False,
                           "An idempotent producer's batch was already written.")
NotController = _error("NotController", 41, "NOT_CONTROLLER", True,
                       "This node is not the controller.")
InvalidRequest = _error("InvalidRequest", 42, "INVALID_REQUEST", False,
                        "The request is malformed or names a state that is not current.")
InvalidProducerEpoch = _error("InvalidProducerEpoch", 47, "INVALID_PRODUCER_EPOCH", False,
                              "The producer's epoch is older than the one the partition knows.")
InvalidTxnState = _error("InvalidTxnState", 48, "INVALID_TXN_STATE", False,
                         "The transactional request does not fit the transaction's state (e.g. commit after abort).")
InvalidProducerIdMapping = _error("InvalidProducerIdMapping", 49, "INVALID_PRODUCER_ID_MAPPING", False,
                                  "The producer id is not the one the coordinator holds for this transactional id.")
InvalidTransactionTimeout = _error("InvalidTransactionTimeout", 50, "INVALID_TRANSACTION_TIMEOUT", False,
                                   "transaction.timeout.ms is not positive or above transaction.max.timeout.ms.")
ConcurrentTransactions = _error("ConcurrentTransactions", 51, "CONCURRENT_TRANSACTIONS", True,
                                "The transaction is still completing (or its state is being written): retry.")
TransactionCoordinatorFenced = _error("TransactionCoordinatorFenced", 52, "TRANSACTION_COORDINATOR_FENCED", False,
                                      "A newer transaction coordinator owns the transactional id.")
ProducerFenced = _error("ProducerFenced", 90, "PRODUCER_FENCED", False,
                        "A newer producer with the same transactional id has bumped the epoch.")
TransactionalIdNotFound = _error("TransactionalIdNotFound", 105, "TRANSACTIONAL_ID_NOT_FOUND", False,
                                 "The coordinator holds no state for this transactional id.")
TransactionAbortable = _error("TransactionAbortable", 120, "TRANSACTION_ABORTABLE", False,
                              "The transaction cannot go on; the producer may abort it and keep its id.")
UnknownProducerId = _error("UnknownProducerId", 59, "UNKNOWN_PRODUCER_ID", False,
                           "The partition has no state for this producer id.")
KafkaStorageError = _error("KafkaStorageError", 56, "KAFKA_STORAGE_ERROR", True,
                           "The replica's disk failed.")
NonEmptyGroup = _error("NonEmptyGroup", 68, "NON_EMPTY_GROUP", False,
                       "The group still has members.")
GroupIdNotFound = _error("GroupIdNotFound", 69, "GROUP_ID_NOT_FOUND", False,
                         "The group does not exist.")
FencedLeaderEpoch = _error("FencedLeaderEpoch", 74, "FENCED_LEADER_EPOCH", True,
                           "The request's leader epoch is older than the replica's.")
UnknownLeaderEpoch = _error("UnknownLeaderEpoch", 75, "UNKNOWN_LEADER_EPOCH", True,
                            "The request's leader epoch is newer than the replica's.")
OffsetNotAvailable = _error("OffsetNotAvailable", 78, "OFFSET_NOT_AVAILABLE", True,
                            "The offset is not available yet (e.g. above the HW after an election).")
MemberIdRequired = _error("MemberIdRequired", 79, "MEMBER_ID_REQUIRED", False,
                          "A new dynamic member must rejoin with the member id the coordinator gave it (KIP-394).")
FencedInstanceId = _error("FencedInstanceId", 82, "FENCED_INSTANCE_ID", False,
                          "Another member joined with this group.instance.id: this one is fenced (KIP-345).")
GroupMaxSizeReached = _error("GroupMaxSizeReached", 81, "GROUP_MAX_SIZE_REACHED", False,
                             "The group already has group.max.size members.")
GroupSubscribedToTopic = _error("GroupSubscribedToTopic", 86, "GROUP_SUBSCRIBED_TO_TOPIC", False,
                                "The group has members subscribed to the topic: its offsets stay.")
FencedMemberEpoch = _error("FencedMemberEpoch", 110, "FENCED_MEMBER_EPOCH", False,
                           "The member's epoch is not the coordinator's (KIP-848): it must give up its "
                           "partitions and rejoin with epoch 0.")
UnreleasedInstanceId = _error("UnreleasedInstanceId", 111, "UNRELEASED_INSTANCE_ID", False,
                              "A member of this group.instance.id is still in the group: it did not leave "
                              "with epoch -2 (KIP-848).")
UnsupportedAssignor = _error("UnsupportedAssignor", 112, "UNSUPPORTED_ASSIGNOR", False,
                             "The server-side assignor the member named is not one the coordinator has.")
StaleMemberEpoch = _error("StaleMemberEpoch", 113, "STALE_MEMBER_EPOCH", False,
                          "The commit's member epoch is not the member's current one (KIP-848).")
InvalidRegularExpression = _error("InvalidRegularExpression", 128, "INVALID_REGULAR_EXPRESSION", False,
                                  "The subscribed topic regular expression does not compile.")
UnstableOffsetCommit = _error("UnstableOffsetCommit", 88, "UNSTABLE_OFFSET_COMMIT", True,
                              "A transaction's offset commit for the partition is pending (KIP-447): "
                              "ask again once it completes.")


class InvalidRecord(KafkaError):
    """A record is not valid for this topic (e.g. no key on a compacted topic).

    `record_errors`: (index of the record in its batch, why) for each record that
    failed a per-record check (Kafka's RecordValidationException, KIP-467); empty
    when the batch as a whole was refused. Produce v8+ answers carry them, with the
    message as the partition's error_message."""

    code = 87
    kafka_name = "INVALID_RECORD"
    retriable = False

    def __init__(self, message: str = "", record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)

    def __reduce__(self):
        return (type(self), (self.message, self.record_errors))

    @classmethod
    def rejected_records(cls, record_errors: list[tuple[int, str]]) -> InvalidRecord:
        """The batch's failed records, with Kafka's message for them
        (LogValidator.processRecordErrors: the count, then at most three)."""
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{why}')" for index, why in record_errors[:3])
        return cls(f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
                   f"and only showing the first three errors at most: [{shown}]", tuple(record_errors))


# Authorization (Kafka's ACLs, core.acl): never retriable, a retry is refused the same way
TopicAuthorizationFailed = _error("TopicAuthorizationFailed", 29, "TOPIC_AUTHORIZATION_FAILED", False,
                                  "The principal may not do this operation on the topic.")
GroupAuthorizationFailed = _error("GroupAuthorizationFailed", 30, "GROUP_AUTHORIZATION_FAILED", False,
                                  "The principal may not do this operation on the group.")
ClusterAuthorizationFailed = _error("ClusterAuthorizationFailed", 31, "CLUSTER_AUTHORIZATION_FAILED", False,
                                    "The principal may not do this operation on the cluster.")
TransactionalIdAuthorizationFailed = _error("TransactionalIdAuthorizationFailed", 53,
                                            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False,
                                            "The principal may not use this transactional id.")

UnsupportedSaslMechanism = _error("UnsupportedSaslMechanism", 33, "UNSUPPORTED_SASL_MECHANISM", False,
                                  "The SASL mechanism asked for is not enabled on this listener.")
IllegalSaslState = _error("IllegalSaslState", 34, "ILLEGAL_SASL_STATE", False,
                          "A SASL request came when the connection's authentication did not expect it.")
SaslAuthenticationFailed = _error("SaslAuthenticationFailed", 58, "SASL_AUTHENTICATION_FAILED", False,
                                  "The SASL credentials were refused (unknown user or wrong password).")
PolicyViolation = _error("PolicyViolation", 44, "POLICY_VIOLATION", False,
                         "The request breaks a policy of the topic (DeleteRecords on a compact-only topic).")
ThrottlingQuotaExceeded = _error("ThrottlingQuotaExceeded", 89, "THROTTLING_QUOTA_EXCEEDED", True,
                                 "The client's controller_mutation_rate quota is used up: retry after "
                                 "the throttle time.")
ResourceNotFound = _error("ResourceNotFound", 91, "RESOURCE_NOT_FOUND", False,
                          "The resource (a user's credential) does not exist.")
DuplicateResource = _error("DuplicateResource", 92, "DUPLICATE_RESOURCE", False,
                           "A request names the same resource (a user's credential) twice.")
UnacceptableCredential = _error("UnacceptableCredential", 93, "UNACCEPTABLE_CREDENTIAL", False,
                                "A SCRAM credential Kafka refuses: an empty user name, or iterations "
                                "outside 4096-16384.")
InvalidUpdateVersion = _error("InvalidUpdateVersion", 95, "INVALID_UPDATE_VERSION", False,
                              "The version named is not the current one (an AlterPartition's partition "
                              "epoch) or cannot be set (an UpdateFeatures' feature level).")

InvalidReplicaAssignment = _error("InvalidReplicaAssignment", 39, "INVALID_REPLICA_ASSIGNMENT", False,
                                  "A replica assignment names a broker twice, or one that is not live.")
ReassignmentInProgress = _error("ReassignmentInProgress", 60, "REASSIGNMENT_IN_PROGRESS", False,
                                "The partition is being reassigned: wait for that to complete.")
NoReassignmentInProgress = _error("NoReassignmentInProgress", 85, "NO_REASSIGNMENT_IN_PROGRESS", False,
                                  "A cancel named a partition that is not being reassigned.")
# ElectLeaders' per-partition answers: Kafka's InvalidMetadataExceptions, so retriable
PreferredLeaderNotAvailable = _error("PreferredLeaderNotAvailable", 80, "PREFERRED_LEADER_NOT_AVAILABLE", True,
                                     "The preferred replica is not alive and in sync, so it cannot lead.")
EligibleLeadersNotAvailable = _error("EligibleLeadersNotAvailable", 83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True,
                                     "No live replica may lead the partition.")
ElectionNotNeeded = _error("ElectionNotNeeded", 84, "ELECTION_NOT_NEEDED", True,
                           "The partition already has the leader the election would choose.")
# Kafka answers a create of a topic still marked for deletion with
# TOPIC_ALREADY_EXISTS ("is marked for deletion"); here the teardown takes a
# moment, so the error says so and is retriable.
TopicDeletionInProgress = _error("TopicDeletionInProgress", 36, "TOPIC_ALREADY_EXISTS", True,
                                 "A topic of this name is still being deleted.")
InconsistentClusterId = _error("InconsistentClusterId", 104, "INCONSISTENT_CLUSTER_ID", False,
                               "A log dir's meta.properties names another cluster id.")
# Kafka refuses to start a broker whose log dir names another broker id
# (InconsistentBrokerIdException, a startup error with no wire code of its own); a
# replica here reports it as a storage error that no retry can clear.
InconsistentBrokerId = _error("InconsistentBrokerId", 56, "KAFKA_STORAGE_ERROR", False,
                              "A log dir's meta.properties names another broker id.")


class NoOffsetForPartitionError(KafkaError):
    """Client side: no committed offset and auto_offset_reset='none'."""

    code = -1
    kafka_name = "NO_OFFSET_FOR_PARTITION"
    retriable = False


class SerializationError(KafkaError, TypeError):
    """Client side: a record's key, value, headers, partition or timestamp cannot
    be written as the wire format wants it (Kafka's SerializationException: no
    serializer fits). The producer raises it from send, before queuing anything.
    Also a TypeError, which is what it is in Python terms."""

    code = -1
    kafka_name = "SERIALIZATION"
    retriable = False


class IllegalStateError(KafkaError):
    """Client side: the call needs a state the client is not in (Kafka's
    IllegalStateException), e.g. seeking a partition that is not assigned, or
    commit_transaction with no transaction begun."""

    code = -1
    kafka_name = "ILLEGAL_STATE"
    retriable = False


class TransactionAborted(KafkaError):
    """Client side: a record sent in a transaction that was aborted before the
    record went out (Kafka's TransactionAbortedException, kafka-python's
    TransactionAbortedError)."""

    code = -1
    kafka_name = "TRANSACTION_ABORTED"
    retriable = False


class CommitFailed(KafkaError):
    """Client side: offsets that can no longer be committed because the group
    moved on without this committer (Kafka's CommitFailedException,
    kafka-python's CommitFailedError); e.g. a Spark stream's batch whose input
    offsets another attempt committed past since the batch was planned."""

    code = -1
    kafka_name = "COMMIT_FAILED"
    retriable = False


class SslAuthenticationFailed(KafkaError):
    """Client side: the TLS handshake failed (the listener's certificate does not
    chain to the CA trusted, names another host, or the listener does not speak
    TLS): Kafka's SslAuthenticationException, which no retry clears."""

    code = -1
    kafka_name = "SSL_AUTHENTICATION_FAILED"
    retriable = False


ERRORS_BY_CODE: dict[int, type[KafkaError]] = {}
for _cls in KafkaError.__subclasses__():   # the first class of a code is the one its code decodes to
    if _cls.code >= 0:
        ERRORS_BY_CODE.setdefault(_cls.code, _cls)
del _cls


def error_for_code(code: int, message: str = "") -> KafkaError:
    """The typed error for a Kafka error code read off the wire (an unknown code:
    UnknownServerError naming it)."""
    error_type = ERRORS_BY_CODE.get(int(code))
    if error_type is None:
        return UnknownServerError(message or f"error code {int(code)}")
    return error_type(message)


def error_or_none(code: int, message: str | None) -> KafkaError | None:
    """An answer's error code and message as its typed error (None for NONE, 0)."""
    return None if int(code) == 0 else error_for_code(int(code), message or "")


def coordinator_append_error(error: BaseException) -> BaseException:
    """What a coordinator answers when the append of its records to its internal
    partition failed (Kafka's CoordinatorOperationExceptionHelper for the group
    coordinator, TransactionStateManager.appendTransactionToLog for the
    transaction one): the partition not writable now is COORDINATOR_NOT_AVAILABLE,
    its leadership gone NOT_COORDINATOR, a batch too large UNKNOWN_SERVER_ERROR, a
    network failure COORDINATOR_LOAD_IN_PROGRESS (retried without a coordinator
    lookup); anything else is answered as it is. Clients handle only these codes
    on group and transaction requests: a Java consumer treats REQUEST_TIMED_OUT
    from SyncGroup or a KIP-848 heartbeat as fatal."""
    if isinstance(error, (UnknownTopicOrPartition, NotEnoughReplicas, NotEnoughReplicasAfterAppend,
                          RequestTimedOut)):
        return CoordinatorNotAvailable(f"the append to the coordinator's partition failed: {error}")
    if isinstance(error, (NotLeaderOrFollower, KafkaStorageError)):
        return NotCoordinator(f"the append to the coordinator's partition failed: {error}")
    if isinstance(error, (RecordTooLarge, RecordListTooLarge)):
        return UnknownServerError(f"the append to the coordinator's partition failed: {error}")
    if isinstance(error, NetworkException):
        return CoordinatorLoadInProgress(f"the append to the coordinator's partition failed: {error}")
    return error
