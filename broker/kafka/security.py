"""Kafka's SASL and ACL APIs on the native handlers (docs/security.md).

- SaslHandshake v1 (key 17): the client names a mechanism; the answer lists the
  listener's enabled ones (UNSUPPORTED_SASL_MECHANISM if it is not among them,
  ILLEGAL_SASL_STATE on a listener without SASL). The choice is kept on the
  connection's session.
- SaslAuthenticate v0-1 (key 36): each message goes to the same `authenticate`
  handler the msgpack protocol uses, with the mechanism of the handshake, so
  credentials, the failed-login delay, the audit events, the metrics and closing
  the connection after a failure are the same for both protocols.

- CreateAcls, DescribeAcls, DeleteAcls v1 (keys 30, 29, 31): Kafka's numbered
  enumerations to the native `create_acls`, `describe_acls`, `delete_acls` and back,
  so `kafka-acls` and admin clients manage the same `acls.json` as `tidelog acls`.
  Kafka's ANY is a filter's "any", its MATCH the native filter's `Match` (every ACL
  that applies to the name: `kafka-acls --list --resource-pattern-type match`);
  resource types Tidelog does not have (transactional ids, tokens, users) are
  INVALID_REQUEST for that entry.

Every other Kafka API is refused before the login by the registry's gate
(broker/kafka/registry.py), whatever its adapter does, and checked against the ACLs
after it by its row's declared rights and those of the native rows it calls.
"""

from __future__ import annotations

from typing import Any

from broker.context import Deferred
from broker.dispatch import failure, handler_for
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.security.acl import MATCH
from broker.security.requires import ANYONE
from broker.security.session import current_session
from protocol.api_types import AuthenticateRequest
from protocol.errors import IllegalSaslState, UnsupportedSaslMechanism
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import (
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)


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
        body: AuthenticateRequest = {
            "mechanism": mechanism,
            "auth_bytes": bytes(call.body["auth_bytes"]),
        }
        answer = await handler_for("authenticate")(call.ctx, body)
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
        "error_code": KafkaError.NONE.code,
        "error_message": None,
        "auth_bytes": bytes(answer["auth_bytes"]),
        "session_lifetime_ms": 0,  # no re-authentication (KIP-368) is asked for
    }


# Kafka's enumeration numbers (org.apache.kafka.common.acl / resource) -> our names;
# ANY (1) is None, "any" in a filter; MATCH (2) is a filter's only (a creation with it
# is refused by the native handler, INVALID_REQUEST, as Kafka refuses it).
_RESOURCE_TYPES = {1: None, 2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId"}
_PATTERN_TYPES = {1: None, 2: MATCH, 3: "Literal", 4: "Prefixed"}
_OPERATIONS = {
    1: None, 2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter",
    8: "Describe", 9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs",
    12: "IdempotentWrite",
}  # fmt: skip
_PERMISSIONS = {1: None, 2: "Deny", 3: "Allow"}
_ENUMS = {
    "resource_type": _RESOURCE_TYPES,
    "pattern_type": _PATTERN_TYPES,
    "operation": _OPERATIONS,
    "permission": _PERMISSIONS,
}
_NUMBERS = {field: {v: k for k, v in table.items() if v} for field, table in _ENUMS.items()}


class _Unsupported(ValueError):
    pass


def _name(field: str, number: int, *, filtering: bool) -> str | None:
    table = _ENUMS[field]
    if number not in table or (table[number] is None and not filtering):
        raise _Unsupported(f"{field} {number} is not supported here")
    return table[number]


def _entry(body: dict[str, Any], *, filtering: bool, suffix: str = "") -> dict[str, Any]:
    """A Kafka creation (suffix "") or filter (suffix "_filter") as a native ACL entry."""
    resource_type = body[f"resource_type{suffix}"]
    return {
        "principal": body[f"principal{suffix}"],
        "host": body[f"host{suffix}"],
        "resource_type": _name("resource_type", resource_type, filtering=filtering),
        "resource_name": body[f"resource_name{suffix}"],
        "pattern_type": _name(
            "pattern_type",
            body["pattern_type_filter" if filtering else "resource_pattern_type"],
            filtering=filtering,
        ),
        "operation": _name("operation", body["operation"], filtering=filtering),
        "permission": _name("permission", body["permission_type"], filtering=filtering),
    }


def _kafka_binding(binding: dict[str, str]) -> dict[str, Any]:
    return {
        "resource_type": _NUMBERS["resource_type"][binding["resource_type"]],
        "resource_name": binding["resource_name"],
        "pattern_type": _NUMBERS["pattern_type"][binding["pattern_type"]],
        "principal": binding["principal"],
        "host": binding["host"],
        "operation": _NUMBERS["operation"][binding["operation"]],
        "permission_type": _NUMBERS["permission"][binding["permission"]],
    }


def _error(exc: Exception, api: str) -> tuple[int, str]:
    if isinstance(exc, _Unsupported):
        return KafkaError.INVALID_REQUEST.code, str(exc)
    err = failure(api, exc)
    return for_tidelog_code(err.code).code, err.message


async def create_acls(call: KafkaCall) -> KafkaAnswer:
    entries: list[dict[str, Any] | None] = []
    results: list[dict[str, Any]] = []
    for creation in call.body["creations"]:
        try:
            entries.append(_entry(creation, filtering=False))
            results.append({"error_code": KafkaError.NONE.code, "error_message": None})
        except _Unsupported as exc:
            entries.append(None)
            results.append(
                {"error_code": KafkaError.INVALID_REQUEST.code, "error_message": str(exc)}
            )
    wanted = [e for e in entries if e is not None]
    try:
        answer = await handler_for("create_acls")(call.ctx, {"acls": wanted}) if wanted else None
        assert not isinstance(answer, Deferred)  # create_acls answers at once
        native = iter(answer["results"] if answer else [])
        for entry, result in zip(entries, results, strict=True):
            if entry is not None:
                got = next(native)
                if got["error"]:
                    result["error_code"] = for_tidelog_code(got["error"]).code
                    result["error_message"] = got["message"]
    except Exception as exc:
        code, message = _error(exc, "create_acls")
        for result in results:
            result["error_code"], result["error_message"] = code, message
    return {"throttle_time_ms": 0, "results": results}


async def describe_acls(call: KafkaCall) -> KafkaAnswer:
    try:
        found = await handler_for("describe_acls")(
            call.ctx, _entry(call.body, filtering=True, suffix="_filter")
        )
    except Exception as exc:
        code, message = _error(exc, "describe_acls")
        return {
            "throttle_time_ms": 0,
            "error_code": code,
            "error_message": message,
            "resources": [],
        }
    assert isinstance(found, dict)
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for binding in found["acls"]:
        kafka = _kafka_binding(binding)
        key = (kafka["resource_type"], kafka["resource_name"], kafka["pattern_type"])
        resources.setdefault(key, []).append(
            {k: kafka[k] for k in ("principal", "host", "operation", "permission_type")}
        )
    return {
        "throttle_time_ms": 0,
        "error_code": KafkaError.NONE.code,
        "error_message": None,
        "resources": [
            {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
            for (t, n, p), acls in resources.items()
        ],
    }


async def delete_acls(call: KafkaCall) -> KafkaAnswer:
    results: list[dict[str, Any]] = []
    for kafka_filter in call.body["filters"]:
        try:
            answer = await handler_for("delete_acls")(
                call.ctx, {"filters": [_entry(kafka_filter, filtering=True, suffix="_filter")]}
            )
            assert isinstance(answer, dict)
            (native,) = answer["results"]
            code = for_tidelog_code(native["error"]).code
            results.append(
                {
                    "error_code": code,
                    "error_message": native["message"],
                    "matching_acls": [
                        {
                            "error_code": KafkaError.NONE.code,
                            "error_message": None,
                            **_kafka_binding(b),
                        }
                        for b in native["deleted"]
                    ],
                }
            )
        except Exception as exc:
            code, message = _error(exc, "delete_acls")
            results.append({"error_code": code, "error_message": message, "matching_acls": []})
    return {"throttle_time_ms": 0, "filter_results": results}


HANDLERS: dict[int, KafkaApi] = {
    SASL_HANDSHAKE.key: KafkaApi(sasl_handshake, ANYONE),
    SASL_AUTHENTICATE.key: KafkaApi(sasl_authenticate, ANYONE, via=("authenticate",)),
    CREATE_ACLS.key: KafkaApi(create_acls, via=("create_acls",)),
    DESCRIBE_ACLS.key: KafkaApi(describe_acls, via=("describe_acls",)),
    DELETE_ACLS.key: KafkaApi(delete_acls, via=("delete_acls",)),
}
