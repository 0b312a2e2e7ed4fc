"""The `authenticate` API (a Tidelog extension, docs/protocol.md §9): its typed call.

A connection to a `SASL_*` listener must authenticate before anything else. Each
request carries one SASL message of `mechanism`; the answer carries the broker's
message and whether the exchange is `complete` (then `principal` names who the
connection now is). PLAIN takes one step, SCRAM-SHA-256/512 two. The schema is
declared in `protocol.schemas` with every other API's.
"""

from __future__ import annotations

from typing import Any

from protocol.calls import Call
from protocol.schemas import AUTHENTICATE as API_NAME

__all__ = ["API_NAME", "authenticate"]


def authenticate(mechanism: str, auth_bytes: bytes) -> Call[tuple[bytes, bool, str | None]]:
    """One exchange step; the answer is `(auth_bytes, complete, principal)`."""

    def extract(body: dict[str, Any]) -> tuple[bytes, bool, str | None]:
        return bytes(body["auth_bytes"]), body["complete"], body.get("principal")

    return Call(API_NAME, {"mechanism": mechanism, "auth_bytes": auth_bytes}, extract)
