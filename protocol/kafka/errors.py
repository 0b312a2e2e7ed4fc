"""Kafka's error codes as one registry: name, code and whether a retry can help.

`KafkaError` mirrors `org.apache.kafka.common.protocol.Errors` (Apache Kafka 4.0):
every code a Kafka client knows, so a response never carries a number the client
cannot name. It is also the one place adapters and codecs take their error
constants from (`KafkaError.INVALID_REQUEST`); no module declares its own.
`retriable` is True where Kafka's exception class derives from
`RetriableException`. Tidelog's own error names (protocol/errors.py) are Kafka's
names (STORAGE_ERROR is KAFKA_STORAGE_ERROR), so `for_tidelog_code` maps them by
name; a Tidelog code Kafka lacks becomes UNKNOWN_SERVER_ERROR.

Malformed Kafka input of any kind becomes `KafkaCodecError`, which carries the Kafka
error to answer with and chains the low-level cause.
"""

from __future__ import annotations

from enum import Enum, unique

__all__ = [
    "ERRORS_BY_CODE",
    "ERRORS_BY_NAME",
    "KafkaCodecError",
    "KafkaError",
    "error_for_code",
    "for_tidelog_code",
]


# Marks a member whose Kafka exception derives from `RetriableException`.
RETRIABLE = True


@unique
class KafkaError(Enum):
    """One of Kafka's error codes: its wire `code`, its `name`, whether a retry can help.

    Written `NAME = code` (`, RETRIABLE` where a retry can help), in Kafka's order, so
    the constants every adapter imports and the registry are one table. A plain Enum,
    not an IntEnum: a member is always truthy (NONE is not a falsy 0 in `a or b`) and
    never equal to a bare int, so only `.code`, a plain int, goes into a response.
    """

    retriable: bool

    def __new__(cls, code: int, retriable: bool = False) -> KafkaError:
        member = object.__new__(cls)
        member._value_ = code
        member.retriable = retriable
        return member

    @property
    def code(self) -> int:
        code: int = self._value_
        return code

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2, RETRIABLE
    UNKNOWN_TOPIC_OR_PARTITION = 3, RETRIABLE
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5, RETRIABLE
    NOT_LEADER_OR_FOLLOWER = 6, RETRIABLE
    REQUEST_TIMED_OUT = 7, RETRIABLE
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9, RETRIABLE
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13, RETRIABLE
    COORDINATOR_LOAD_IN_PROGRESS = 14, RETRIABLE
    COORDINATOR_NOT_AVAILABLE = 15, RETRIABLE
    NOT_COORDINATOR = 16, RETRIABLE
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19, RETRIABLE
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20, RETRIABLE
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41, RETRIABLE
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51, RETRIABLE
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56, RETRIABLE
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70, RETRIABLE
    INVALID_FETCH_SESSION_EPOCH = 71, RETRIABLE
    LISTENER_NOT_FOUND = 72, RETRIABLE
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74, RETRIABLE
    UNKNOWN_LEADER_EPOCH = 75, RETRIABLE
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78, RETRIABLE
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80, RETRIABLE
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83, RETRIABLE
    ELECTION_NOT_NEEDED = 84, RETRIABLE
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88, RETRIABLE
    THROTTLING_QUOTA_EXCEEDED = 89, RETRIABLE
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    UNKNOWN_TOPIC_ID = 100, RETRIABLE
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103, RETRIABLE
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106, RETRIABLE
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122, RETRIABLE
    INVALID_SHARE_SESSION_EPOCH = 123, RETRIABLE
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129


ERRORS_BY_CODE: dict[int, KafkaError] = {e.code: e for e in KafkaError}
ERRORS_BY_NAME: dict[str, KafkaError] = {e.name: e for e in KafkaError}


def error_for_code(code: int) -> KafkaError:
    """The registry entry for a wire code; an unknown code is UNKNOWN_SERVER_ERROR."""
    return ERRORS_BY_CODE.get(code, KafkaError.UNKNOWN_SERVER_ERROR)


# Tidelog names that differ from Kafka's for the same meaning.
_TIDELOG_ALIASES = {
    "STORAGE_ERROR": "KAFKA_STORAGE_ERROR",
    # Kafka answers UNKNOWN_SERVER_ERROR for a failed remote read (RemoteStorageException
    # is no ApiException); KAFKA_STORAGE_ERROR is retriable and says what failed.
    "REMOTE_STORAGE_ERROR": "KAFKA_STORAGE_ERROR",
}


def for_tidelog_code(code: str | None) -> KafkaError:
    """The Kafka error for a Tidelog error name (docs/protocol.md §5); None is NONE.

    Tidelog named its codes after Kafka's, so the names coincide but for the
    aliases above; a name Kafka lacks is UNKNOWN_SERVER_ERROR rather than invented.
    """
    if code is None:
        return KafkaError.NONE
    return ERRORS_BY_NAME.get(_TIDELOG_ALIASES.get(code, code), KafkaError.UNKNOWN_SERVER_ERROR)


class KafkaCodecError(Exception):
    """Kafka bytes that cannot be decoded (or a message that cannot be encoded).

    The one error type of this package: `error` is the Kafka error to answer with
    (INVALID_REQUEST for a malformed request, UNSUPPORTED_VERSION for an API or
    version we do not serve, CORRUPT_MESSAGE for a damaged record batch), and the
    low-level cause, if any, is chained.
    """

    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(f"{error.name} ({error.code}): {message}")
        self.error = error
        self.message = message

    @property
    def code(self) -> int:
        return self.error.code
