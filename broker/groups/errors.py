"""Group coordination errors, named and coded as Kafka names them.

Each class knows its wire `code` and whether a retry can help, like
`protocol/errors.py`; they live here until the wire protocol for groups lands (a
later session moves them into the shared registry). Responses carry `error` as the
code string (None for success), so the driver can put it on either wire.
"""

from __future__ import annotations

from protocol.errors import TidelogError


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


GROUP_ERRORS: dict[str, type[TidelogError]] = {
    cls.code: cls
    for cls in (
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
    )
}
