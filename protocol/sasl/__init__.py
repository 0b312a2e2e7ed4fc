"""SASL mechanisms, sans-I/O: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677).

Both sides live here because both need them: the broker verifies (broker/security/),
our clients (tidelog/) authenticate, and neither may import the other. Messages are
bytes in, bytes out; the caller owns the connection.
"""

from protocol.sasl.plain import parse_plain, plain_message
from protocol.sasl.scram import (
    MECHANISMS,
    SCRAM_MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    derive_credential,
    scram_mechanism,
)

__all__ = [
    "MECHANISMS",
    "SCRAM_MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "derive_credential",
    "parse_plain",
    "plain_message",
    "scram_mechanism",
]
