"""SASL PLAIN (RFC 4616): one message, `authzid NUL authcid NUL password`, UTF-8."""

from __future__ import annotations

from protocol.errors import SaslAuthenticationFailed

# RFC 4616 §2: each field is at most 255 octets.
PLAIN_FIELD_BYTES_MAX = 255


def plain_message(username: str, password: str) -> bytes:
    """The client's one message (no authorization identity: act as yourself)."""
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")


def parse_plain(message: bytes) -> tuple[str, str]:
    """(username, password) of a PLAIN message; SASL_AUTHENTICATION_FAILED if malformed.

    An authorization identity other than the user itself is refused (Kafka does the
    same): a user cannot ask to act as someone else.
    """
    parts = bytes(message).split(b"\0")
    if len(parts) != 3 or any(len(p) > PLAIN_FIELD_BYTES_MAX for p in parts):
        raise SaslAuthenticationFailed("malformed PLAIN message")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError as exc:
        raise SaslAuthenticationFailed("PLAIN message is not UTF-8") from exc
    if not user or not password:
        raise SaslAuthenticationFailed("PLAIN message needs a username and a password")
    if authzid and authzid != user:
        raise SaslAuthenticationFailed("PLAIN authorization identity must be the user itself")
    return user, password
