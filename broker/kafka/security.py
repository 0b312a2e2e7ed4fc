"""Kafka's SASL APIs on the native `authenticate` handler (docs/security.md).

- SaslHandshake v1 (key 17): the client names a mechanism; the answer lists the
  listener's enabled ones (UNSUPPORTED_SASL_MECHANISM if it is not among them,
  ILLEGAL_SASL_STATE on a listener without SASL). The choice is kept on the
  connection's session.
- SaslAuthenticate v0-1 (key 36): each message goes to the same `authenticate`
  handler the msgpack protocol uses, with the mechanism of the handshake, so
  credentials, the failed-login delay, the audit events, the metrics and closing
  the connection after a failure are the same for both protocols.

The authentication gate and the authorizer sit in `broker.dispatch.handler_for`, so
every other Kafka adapter that calls a native handler is refused before login on a
SASL listener and checked against the ACLs after it.
"""

from __future__ import annotations

from broker.dispatch import failure, handler_for
from broker.kafka.call import KafkaAnswer, KafkaCall, KafkaHandler
from broker.security.session import current_session
from protocol.errors import IllegalSaslState, UnsupportedSaslMechanism
from protocol.kafka.errors import NONE, for_tidelog_code
from protocol.kafka.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE


async def sasl_handshake(call: KafkaCall) -> KafkaAnswer:
    security = call.ctx.security
    session = current_session()
    enabled = sorted(security.mechanisms) if security is not None else []
    if security is None or session is None or not session.protocol.sasl:
        error = IllegalSaslState.code
    elif call.body["mechanism"] not in enabled:
        error = UnsupportedSaslMechanism.code
    else:
        session.handshake_mechanism = call.body["mechanism"]
        error = None
    return {"error_code": for_tidelog_code(error).code, "mechanisms": enabled}


async def sasl_authenticate(call: KafkaCall) -> KafkaAnswer:
    session = current_session()
    mechanism = session.handshake_mechanism if session is not None else ""
    try:
        if not mechanism:
            raise IllegalSaslState("SaslAuthenticate before a SaslHandshake")
        answer = await handler_for("authenticate")(
            call.ctx, {"mechanism": mechanism, "auth_bytes": bytes(call.body["auth_bytes"])}
        )
    except Exception as exc:
        err = failure("authenticate", exc)
        return {
            "error_code": for_tidelog_code(err.code).code,
            "error_message": err.message,
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }
    assert isinstance(answer, dict)
    return {
        "error_code": NONE.code,
        "error_message": None,
        "auth_bytes": bytes(answer["auth_bytes"]),
        "session_lifetime_ms": 0,  # no re-authentication (KIP-368) is asked for
    }


HANDLERS: dict[int, KafkaHandler] = {
    SASL_HANDSHAKE.key: sasl_handshake,
    SASL_AUTHENTICATE.key: sasl_authenticate,
}
