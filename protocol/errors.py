"""The error registry of docs/protocol.md §5: one exception class per wire code.

Every error Tidelog reports to a client is one of these classes. Each knows its
wire `code` and whether retrying the same request can help (`retriable`), so the
broker maps exceptions to codes in one place and clients map codes back to
exceptions without a table of their own.
"""

from __future__ import annotations

from typing import ClassVar


class TidelogError(Exception):
    """Base of every error with a wire code."""

    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code


class UnknownServerError(TidelogError):
    code = "UNKNOWN_SERVER_ERROR"


class InvalidRequest(TidelogError):
    code = "INVALID_REQUEST"


class UnsupportedVersion(TidelogError):
    code = "UNSUPPORTED_VERSION"


class CorruptMessage(TidelogError):
    """A batch failed its length, CRC, layout or payload check.

    Retriable as in Kafka: a batch corrupted in transit may arrive intact next time.
    """

    code = "CORRUPT_MESSAGE"
    retriable = True


class MessageTooLarge(TidelogError):
    code = "MESSAGE_TOO_LARGE"


class InvalidRecord(TidelogError):
    code = "INVALID_RECORD"


class InvalidTimestamp(TidelogError):
    code = "INVALID_TIMESTAMP"


class UnknownTopicOrPartition(TidelogError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


class TopicAlreadyExists(TidelogError):
    code = "TOPIC_ALREADY_EXISTS"


class InvalidTopic(TidelogError):
    code = "INVALID_TOPIC_EXCEPTION"


class InvalidPartitions(TidelogError):
    code = "INVALID_PARTITIONS"


class InvalidConfig(TidelogError):
    code = "INVALID_CONFIG"


class OffsetOutOfRange(TidelogError):
    code = "OFFSET_OUT_OF_RANGE"


class StorageError(TidelogError):
    """Disk full or an I/O error; the log stays consistent and the broker keeps running."""

    code = "STORAGE_ERROR"
    retriable = True


class RemoteStorageError(StorageError):
    """Tiered storage (docs/tiered-reads.md): the object store could not serve a read
    below the local log start (down, slow past the timeout, an error status, a body
    shorter than asked for). Only the partitions that need the store get it; retrying
    can succeed once the store answers (Kafka's KAFKA_STORAGE_ERROR, retriable)."""

    code = "REMOTE_STORAGE_ERROR"
    retriable = True


class RequestTimedOut(TidelogError):
    code = "REQUEST_TIMED_OUT"
    retriable = True


class PolicyViolation(TidelogError):
    code = "POLICY_VIOLATION"


# Idempotent producer errors: none is retriable as such (Kafka's classes are plain
# ApiExceptions); the producer reacts to each in its own way (docs/idempotence.md).
class OutOfOrderSequenceNumber(TidelogError):
    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequenceNumber(TidelogError):
    code = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpoch(TidelogError):
    code = "INVALID_PRODUCER_EPOCH"


class UnknownProducerId(TidelogError):
    code = "UNKNOWN_PRODUCER_ID"


class ProducerFenced(TidelogError):
    code = "PRODUCER_FENCED"


# Group coordination errors (issue 20, broker/groups/), Kafka's names and retriability.
class CoordinatorNotAvailable(TidelogError):
    """The group is Dead (being removed) or its metadata could not be stored."""

    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class CoordinatorLoadInProgress(TidelogError):
    """The driver is still loading `__consumer_offsets`; ask again shortly."""

    code = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class NotCoordinator(TidelogError):
    code = "NOT_COORDINATOR"
    retriable = True


class InvalidGroupId(TidelogError):
    code = "INVALID_GROUP_ID"


class InvalidSessionTimeout(TidelogError):
    code = "INVALID_SESSION_TIMEOUT"


class InconsistentGroupProtocol(TidelogError):
    """The member's protocol type differs, or it shares no assignor with the group."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class MemberIdRequired(TidelogError):
    """A new member's first join: rejoin with the member id in the response."""

    code = "MEMBER_ID_REQUIRED"


class UnknownMemberId(TidelogError):
    code = "UNKNOWN_MEMBER_ID"


class IllegalGeneration(TidelogError):
    code = "ILLEGAL_GENERATION"


class RebalanceInProgress(TidelogError):
    code = "REBALANCE_IN_PROGRESS"


class FencedInstanceId(TidelogError):
    """Another member now holds this group.instance.id (static membership)."""

    code = "FENCED_INSTANCE_ID"


class GroupMaxSizeReached(TidelogError):
    code = "GROUP_MAX_SIZE_REACHED"


class NonEmptyGroup(TidelogError):
    code = "NON_EMPTY_GROUP"


class GroupIdNotFound(TidelogError):
    code = "GROUP_ID_NOT_FOUND"


class OffsetMetadataTooLarge(TidelogError):
    code = "OFFSET_METADATA_TOO_LARGE"


# Security (docs/security.md): Kafka's names, so the Kafka codec maps them by name.
class TopicAuthorizationFailed(TidelogError):
    code = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailed(TidelogError):
    code = "GROUP_AUTHORIZATION_FAILED"


class ClusterAuthorizationFailed(TidelogError):
    code = "CLUSTER_AUTHORIZATION_FAILED"


class UnsupportedSaslMechanism(TidelogError):
    code = "UNSUPPORTED_SASL_MECHANISM"


class IllegalSaslState(TidelogError):
    """An exchange step out of order, or any request before authentication finished."""

    code = "ILLEGAL_SASL_STATE"


class SecurityDisabled(TidelogError):
    """An ACL API on a broker whose authorizer is off (Kafka's answer too)."""

    code = "SECURITY_DISABLED"


class SaslAuthenticationFailed(TidelogError):
    """Wrong user or password (never says which), or a malformed exchange message."""

    code = "SASL_AUTHENTICATION_FAILED"


ERRORS: dict[str, type[TidelogError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        InvalidRequest,
        UnsupportedVersion,
        CorruptMessage,
        MessageTooLarge,
        InvalidRecord,
        InvalidTimestamp,
        UnknownTopicOrPartition,
        TopicAlreadyExists,
        InvalidTopic,
        InvalidPartitions,
        InvalidConfig,
        OffsetOutOfRange,
        StorageError,
        RemoteStorageError,
        RequestTimedOut,
        PolicyViolation,
        OutOfOrderSequenceNumber,
        DuplicateSequenceNumber,
        InvalidProducerEpoch,
        UnknownProducerId,
        ProducerFenced,
        CoordinatorNotAvailable,
        CoordinatorLoadInProgress,
        NotCoordinator,
        InvalidGroupId,
        InvalidSessionTimeout,
        InconsistentGroupProtocol,
        MemberIdRequired,
        UnknownMemberId,
        IllegalGeneration,
        RebalanceInProgress,
        FencedInstanceId,
        GroupMaxSizeReached,
        NonEmptyGroup,
        GroupIdNotFound,
        OffsetMetadataTooLarge,
        TopicAuthorizationFailed,
        GroupAuthorizationFailed,
        ClusterAuthorizationFailed,
        UnsupportedSaslMechanism,
        IllegalSaslState,
        SaslAuthenticationFailed,
        SecurityDisabled,
    )
}


def error_class(code: str) -> type[TidelogError]:
    """The class for a wire code; codes from a newer broker map to UnknownServerError."""
    return ERRORS.get(code, UnknownServerError)


def error_from_wire(code: str, message: str | None) -> TidelogError:
    """Rebuild the exception a broker reported, keeping unknown codes visible."""
    cls = error_class(code)
    text = message or ""
    if cls is UnknownServerError and code != UnknownServerError.code:
        text = f"{code}: {text}" if text else code
    return cls(text)
