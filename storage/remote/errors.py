"""The one error type of the object store, with whether a retry can help.

Every failure of a store call (connection refused, timeout, a 5xx, a 403, a missing
key, a truncated body) becomes a `RemoteStorageError` naming the operation, the key
and the cause (chained), so the uploader's retry loop and the readers decide from
`retriable` alone and an operator reads what failed from the message.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["RemoteErrorKind", "RemoteStorageError"]


class RemoteErrorKind(StrEnum):
    """What went wrong; the value is the `kind` label of logs and metrics."""

    UNAVAILABLE = "unavailable"  # no connection, a timeout, a reset: the store is down
    SERVER_ERROR = "server_error"  # a 5xx answer (or 429/503 throttling)
    FORBIDDEN = "forbidden"  # 401/403: credentials or policy; a retry will not help
    NOT_FOUND = "not_found"  # no such key or bucket
    PRECONDITION = "precondition"  # a conditional request refused (412)
    CORRUPT = "corrupt"  # a body shorter than asked for, or an answer we cannot read
    CLIENT_ERROR = "client_error"  # any other 4xx: a request the store will never accept


_RETRIABLE = frozenset(
    {RemoteErrorKind.UNAVAILABLE, RemoteErrorKind.SERVER_ERROR, RemoteErrorKind.CORRUPT}
)


class RemoteStorageError(Exception):
    """A store call failed. `retriable`: whether the same call may succeed later."""

    def __init__(self, message: str, kind: RemoteErrorKind, *, key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.key = key

    @property
    def retriable(self) -> bool:
        return self.kind in _RETRIABLE

    def __str__(self) -> str:
        return f"{self.message} ({self.kind.value}{', retriable' if self.retriable else ''})"
