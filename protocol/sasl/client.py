"""The client's side of a whole SASL exchange, whatever the mechanism (sans-I/O).

    auth = SaslClient("SCRAM-SHA-512", "alice", password)
    token = auth.start()
    while token is not None:
        answer = <send token with the mechanism, receive the broker's bytes and `complete`>
        token = auth.respond(answer_bytes, complete)

`respond` raises SASL_AUTHENTICATION_FAILED if the broker's messages do not check
out (SCRAM: the broker did not prove it knows the user's key).
"""

from __future__ import annotations

from protocol.errors import IllegalSaslState, UnsupportedSaslMechanism
from protocol.sasl.plain import plain_message
from protocol.sasl.scram import MECHANISMS, SCRAM_MECHANISMS, ScramClient


class SaslClient:
    """One exchange of `mechanism` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        if mechanism not in MECHANISMS:
            raise UnsupportedSaslMechanism(
                f"unsupported SASL mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})"
            )
        self.mechanism = mechanism
        self._username, self._password = username, password
        self._scram: ScramClient | None = None
        self._steps = 0

    def start(self) -> bytes:
        """The first message to send."""
        if self.mechanism == "PLAIN":
            return plain_message(self._username, self._password)
        self._scram = ScramClient(SCRAM_MECHANISMS[self.mechanism], self._username, self._password)
        return self._scram.first()

    def respond(self, server: bytes, complete: bool) -> bytes | None:
        """The next message to send, or None when the exchange is done (and checked)."""
        self._steps += 1
        if self._scram is None:  # PLAIN: one step, nothing to check
            if not complete:
                raise IllegalSaslState("PLAIN takes one step but the broker wants more")
            return None
        if self._steps == 1 and not complete:
            return self._scram.final(bytes(server))
        if self._steps == 2 and complete:
            self._scram.verify(bytes(server))
            return None
        raise IllegalSaslState(f"unexpected SCRAM step {self._steps} (complete={complete})")
