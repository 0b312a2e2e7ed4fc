"""Kafka's client quota APIs: DescribeClientQuotas and AlterClientQuotas.

What `kafka-configs --entity-type users/clients --describe/--alter` and an admin
client's `describeClientQuotas`/`alterClientQuotas` call, answered as Kafka 4.4's
KRaft broker answers (its `ClientQuotasImage.describe` and
`ClientQuotaControlManager`): entities of a user, a client id or both, each a name or
the default; the quota keys Tidelog enforces (broker/quotas/store.py). The limits
are kept in the data directory and apply at once (broker/quotas/limits.py).
DescribeConfigs on the cluster to describe, AlterConfigs on the cluster to alter.

Deviations, both refusals of what Tidelog does not enforce: the `ip` entity type
(connection_creation_rate) and `controller_mutation_rate` are refused with
INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.quotas.store import CLIENT_ID, QUOTA_KEYS, USER, Entity, entity_of
from broker.security.acl import Operation, ResourceType
from broker.security.requires import Requires, Right
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

# DescribeClientQuotas' match types (Kafka's ClientQuotaFilterComponent).
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
IP = "ip"
_ENTITY_TYPES = (USER, CLIENT_ID)

_DESCRIBE_CONFIGS = Right(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
_ALTER_CONFIGS = Right(Operation.ALTER_CONFIGS, ResourceType.CLUSTER)


class _Invalid(Exception):
    def __init__(self, error: KafkaError, message: str) -> None:
        super().__init__(message)
        self.error, self.message = error, message


def _entity_text(entity: Entity) -> str:
    """An entity as Kafka's `ClientQuotaEntity.toString` prints it."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


# --- DescribeClientQuotas -------------------------------------------------------------


def _filter(components: list[dict[str, Any]]) -> tuple[dict[str, str | None], set[str]]:
    """Kafka's filter checks, in its order: (exact names, types that must be present)."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for component in components:
        kind, match = component["entity_type"], component["match"]
        if not kind:
            raise _Invalid(KafkaError.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in present:
            raise _Invalid(
                KafkaError.INVALID_REQUEST,
                f"Entity type {kind} cannot appear more than once in the filter.",
            )
        if kind not in (*_ENTITY_TYPES, IP):
            raise _Invalid(KafkaError.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        match_type = component["match_type"]
        if match_type == MATCH_EXACT:
            if match is None:
                raise _Invalid(
                    KafkaError.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.",
                )
            exact[kind] = match
        elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if match is not None:
                name = (
                    "MATCH_TYPE_DEFAULT" if match_type == MATCH_DEFAULT else "MATCH_TYPE_SPECIFIED"
                )
                raise _Invalid(
                    KafkaError.INVALID_REQUEST,
                    f"Request specified {name}, but also specified a match string.",
                )
            if match_type == MATCH_DEFAULT:
                exact[kind] = None
            else:
                present.add(kind)
        else:
            raise _Invalid(KafkaError.INVALID_REQUEST, f"Unknown match type {match_type}")
    if (IP in exact or IP in present) and (set(exact) | present) - {IP}:
        raise _Invalid(
            KafkaError.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should "
            "not be used with user or clientId filter component.",
        )
    return exact, present


def _matches(entity: Entity, exact: dict[str, str | None], present: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(present):
        return False
    if any(kind not in names or names[kind] != name for kind, name in exact.items()):
        return False
    return all(kind in names for kind in present)


async def describe_client_quotas(call: KafkaCall) -> KafkaAnswer:
    """DescribeClientQuotas v0-1: every stored entity the filter matches."""
    try:
        exact, present = _filter(call.body["components"])
    except _Invalid as invalid:
        return _described_refused(call, invalid.error, invalid.message)
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            "values": [{"key": k, "value": v} for k, v in sorted(quotas.items())],
        }
        for entity, quotas in call.ctx.quotas.store.entities().items()
        if _matches(entity, exact, present, call.body["strict"])
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


def _described_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `DescribeClientQuotasRequest.getErrorResponse`: no entries (null)."""
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "error_message": message,
        "entries": None,
    }


# --- AlterClientQuotas ----------------------------------------------------------------


def _check_entity(entry: dict[str, Any]) -> Entity:
    """Kafka's `validateEntity` and `configKeysForEntityType` for users and client ids."""
    seen: dict[str, str | None] = {}
    if not entry["entity"]:
        raise _Invalid(KafkaError.INVALID_REQUEST, "Invalid empty client quota entity")
    for part in entry["entity"]:
        kind, name = part["entity_type"], part["entity_name"]
        if kind in seen:
            raise _Invalid(
                KafkaError.INVALID_REQUEST,
                f"Invalid client quota entity, duplicate entity entry {kind}",
            )
        if kind not in _ENTITY_TYPES:
            # Kafka serves ip entities (connection_creation_rate): Tidelog does not.
            raise _Invalid(
                KafkaError.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}"
            )
        if name is not None and not name:
            raise _Invalid(KafkaError.INVALID_REQUEST, f"Empty {kind} not supported")
        seen[kind] = name
    return entity_of(seen.items())


def _check_value(key: str, value: float) -> None:
    """Kafka's `validateQuotaKeyValue` for the keys Tidelog enforces."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        raise _Invalid(KafkaError.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value <= 0.0:
        raise _Invalid(KafkaError.INVALID_REQUEST, f"Quota {key} must be greater than 0")
    if whole and value > 2**63 - 1:
        raise _Invalid(
            KafkaError.INVALID_REQUEST, f"Proposed value for {key} is too large for a LONG."
        )
    if whole and abs(value % 1.0) > 1e-6:
        raise _Invalid(KafkaError.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def _changes(entry: dict[str, Any], entity: Entity) -> dict[str, float | None]:
    ops: dict[str, float | None] = {}
    for op in entry["ops"]:
        if op["key"] in ops:
            raise _Invalid(
                KafkaError.INVALID_REQUEST,
                f"Duplicate quota key {op['key']} not updating quota for this entity "
                f"{_entity_text(entity)}",
            )
        ops[op["key"]] = None if op["remove"] else op["value"]
    for key, value in ops.items():
        if value is not None:
            _check_value(key, value)
    return ops


def _entity_fields(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"entity_type": p["entity_type"], "entity_name": p["entity_name"]} for p in entry["entity"]
    ]


async def alter_client_quotas(call: KafkaCall) -> KafkaAnswer:
    """AlterClientQuotas v0-1: each entity's changes checked, the valid ones stored at
    once (unless `validate_only`), an outcome per entity."""
    changes: dict[Entity, dict[str, float | None]] = {}
    results = []
    for entry in call.body["entries"]:
        error, message = KafkaError.NONE, None
        try:
            entity = _check_entity(entry)
            if entity in changes:
                raise _Invalid(
                    KafkaError.INVALID_REQUEST, f"Ignoring duplicate entity {_entity_text(entity)}"
                )
            changes[entity] = _changes(entry, entity)
        except _Invalid as invalid:
            error, message = invalid.error, invalid.message
        results.append(
            {"error_code": error.code, "error_message": message, "entity": _entity_fields(entry)}
        )
    if changes and not call.body["validate_only"]:
        call.ctx.quotas.store.apply(changes)
    return {"throttle_time_ms": 0, "entries": results}


def _altered_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `AlterClientQuotasRequest.getErrorResponse`: the error on every entity."""
    results = [
        {"error_code": error.code, "error_message": message, "entity": _entity_fields(entry)}
        for entry in call.body["entries"]
    ]
    return {"throttle_time_ms": 0, "entries": results}


HANDLERS: dict[int, KafkaApi] = {
    DESCRIBE_CLIENT_QUOTAS.key: KafkaApi(
        describe_client_quotas, Requires(whole=_DESCRIBE_CONFIGS), _described_refused
    ),
    ALTER_CLIENT_QUOTAS.key: KafkaApi(
        alter_client_quotas, Requires(whole=_ALTER_CONFIGS), _altered_refused
    ),
}
