"""Kafka's config APIs over the native `describe_configs` and `alter_configs`:
DescribeConfigs v1-3, AlterConfigs v0-1, IncrementalAlterConfigs v0-1.

Resources are topics (type 2) and this broker (type 4, named by its node id;
the empty name is the cluster-wide default: Kafka keeps only dynamic defaults
there, Tidelog has none and shows every broker default with its source, so that
`kafka-configs --entity-default --describe --all` lists them).
Topic configs come from the native handlers; the broker's from its config (no
native API describes it). Kafka's answer shapes (source, synonyms, types) are
built by `broker.kafka.config_view`. No broker key can change without a restart,
so altering one is refused as Kafka refuses a key that is not dynamic.

AlterConfigs replaces a topic's whole set of overrides (what it does not name
goes back to the default), IncrementalAlterConfigs changes only what it names;
both become one native `alter_configs` (set + delete) so the result is validated
and applied as a whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.config import BrokerConfig
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.config_view import broker_entries, topic_entries
from broker.kafka.native_call import NativeOutcome, Refused, failed_outcome, run_native
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.security.requires import Requires, Right
from protocol.api_types import AlterConfigsRequest, DescribeConfigsRequest
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from storage.config import TOPIC_CONFIG_DEFS

# ConfigResource.Type ids.
TOPIC, BROKER = 2, 4
# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
# What Kafka says for a describe of a resource type it does not serve.
_MALFORMED = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


def _check_cluster(call: KafkaCall, api: str, op: Operation) -> None:
    """A broker resource's configs need `op` on the cluster (Kafka's rule)."""
    if not call.permits(Right(op, ResourceType.CLUSTER), CLUSTER_NAME):
        raise Refused(
            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            f"not authorized to {op.value} the cluster's configs",
        )


def _check_broker_name(config: BrokerConfig, name: str) -> None:
    """Kafka's checks of a broker resource's name: empty, or this node's id."""
    if name == "":
        return
    me = config.node_id
    try:
        wanted = int(name)
    except ValueError:
        raise Refused(
            KafkaError.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if wanted != me:
        raise Refused(
            KafkaError.INVALID_REQUEST,
            f"Unexpected broker id, expected {me} or empty string, but received {name}",
        )


def _result(resource: dict[str, Any], outcome: NativeOutcome) -> dict[str, Any]:
    return {
        "error_code": outcome.error.code,
        "error_message": outcome.message,
        "resource_type": resource["resource_type"],
        "resource_name": resource["resource_name"],
    }


# --- DescribeConfigs ------------------------------------------------------------------


async def describe_configs(call: KafkaCall) -> KafkaAnswer:
    """DescribeConfigs v1-3: each resource's configs, or its error."""
    results = []
    for resource in call.body["resources"]:
        try:
            outcome, configs = await _describe_one(call, resource)
        except Exception as exc:
            outcome, configs = failed_outcome("describe_configs", exc), []
        if not call.body["include_documentation"]:
            configs = [{**c, "documentation": None} for c in configs]
        results.append({**_result(resource, outcome), "configs": configs})
    return {"throttle_time_ms": 0, "results": results}


async def _describe_one(
    call: KafkaCall, resource: dict[str, Any]
) -> tuple[NativeOutcome, list[dict[str, Any]]]:
    kind, name = resource["resource_type"], resource["resource_name"]
    keys = resource["configuration_keys"]
    synonyms = call.body["include_synonyms"]
    config = call.ctx.config
    if kind == TOPIC:
        outcome = await run_native(call.ctx, "describe_configs", DescribeConfigsRequest(topic=name))
        if outcome.answer is None:
            return outcome, []
        return outcome, topic_entries(
            config, outcome.answer["configs"], keys, include_synonyms=synonyms
        )
    if kind == BROKER:
        _check_cluster(call, "describe_configs", Operation.DESCRIBE_CONFIGS)
        _check_broker_name(config, name)
        # The cluster-wide default (name ""): Kafka lists its dynamic defaults alone;
        # Tidelog has none, and lists the defaults every broker key has, with sources.
        return NativeOutcome({}), broker_entries(config, keys, include_synonyms=synonyms)
    raise Refused(KafkaError.INVALID_REQUEST, _MALFORMED)


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------


def _broker_refusal(config: BrokerConfig, name: str, keys: list[str]) -> NativeOutcome:
    """No broker key is dynamic in Tidelog: Kafka's answer for keys that are not."""
    _check_broker_name(config, name)
    if not keys:
        return NativeOutcome({})
    return NativeOutcome.failed(
        KafkaError.INVALID_REQUEST, f"Cannot update these configs dynamically: [{', '.join(keys)}]"
    )


def _not_topic(call: KafkaCall, resource: dict[str, Any], keys: list[str]) -> NativeOutcome | None:
    """The outcome of a resource that is not a topic (None for a topic)."""
    kind = resource["resource_type"]
    if kind == TOPIC:
        return None
    if kind == BROKER:
        _check_cluster(call, "alter_configs", Operation.ALTER_CONFIGS)
        return _broker_refusal(call.ctx.config, resource["resource_name"], keys)
    return NativeOutcome.failed(KafkaError.INVALID_REQUEST, f"Unknown resource type {kind}")


def _null_refusal(name: str) -> Refused:
    return Refused(KafkaError.INVALID_REQUEST, f"Null value not supported for : {name}")


async def _alter_topic(
    call: KafkaCall, topic: str, new: dict[str, str | int | float], delete: list[str]
) -> NativeOutcome:
    body: AlterConfigsRequest = {
        "topic": topic,
        "set": new,
        "delete": delete,
        "validate_only": call.body["validate_only"],
    }
    return await run_native(call.ctx, "alter_configs", body)


async def _replace_configs(call: KafkaCall, resource: dict[str, Any]) -> NativeOutcome:
    """AlterConfigs: the named configs become the topic's whole set of overrides."""
    configs = resource["configs"]
    other = _not_topic(call, resource, [c["name"] for c in configs])
    if other is not None:
        return other
    new: dict[str, str | int | float] = {}
    for entry in configs:
        if entry["value"] is None:
            raise _null_refusal(entry["name"])
        new[entry["name"]] = entry["value"]
    topic = resource["resource_name"]
    current = call.ctx.manager.topic_overrides(topic) if _known(call, topic) else {}
    return await _alter_topic(call, topic, new, [k for k in current if k not in new])


def _known(call: KafkaCall, topic: str) -> bool:
    return topic in call.ctx.manager.topics()


async def alter_configs(call: KafkaCall) -> KafkaAnswer:
    """AlterConfigs v0-1."""
    return await _per_resource(call, _replace_configs)


def _list_value(op: int, key: str, value: str, current: str | None) -> str:
    """APPEND or SUBTRACT on a list key; the base is the override, else Kafka's default."""
    setting = TOPIC_CONFIG_DEFS.get(key)
    if setting is None or setting.type is not frozenset:
        raise Refused(
            KafkaError.INVALID_CONFIG,
            f"Can't {_OP_NAMES[op]} to key {key} because its type is not LIST.",
        )
    base = current if current is not None else ",".join(sorted(setting.default))
    parts = [p.strip() for p in base.split(",") if p.strip()]
    for item in (p.strip() for p in value.split(",")):
        if op == APPEND and item not in parts:
            parts.append(item)
        elif op == SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


async def _change_configs(call: KafkaCall, resource: dict[str, Any]) -> NativeOutcome:
    """IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT of the named keys only."""
    configs = resource["configs"]
    keys = [c["name"] for c in configs]
    if len(set(keys)) != len(keys):
        return NativeOutcome.failed(
            KafkaError.INVALID_REQUEST, "Error due to duplicate config keys"
        )
    other = _not_topic(call, resource, keys)
    if other is not None:
        return other
    topic = resource["resource_name"]
    current = call.ctx.manager.topic_overrides(topic) if _known(call, topic) else {}
    new: dict[str, str | int | float] = {}
    delete: list[str] = []
    for entry in configs:
        op, key, value = entry["config_operation"], entry["name"], entry["value"]
        if op == DELETE:
            if key in TOPIC_CONFIG_DEFS:  # deleting a key nobody could set is a no-op
                delete.append(key)
            continue
        if op not in _OP_NAMES:
            return NativeOutcome.failed(
                KafkaError.UNKNOWN_SERVER_ERROR, f"unknown config operation {op} ({key})"
            )
        if value is None:
            raise _null_refusal(key)
        new[key] = value if op == SET else _list_value(op, key, value, current.get(key))
    return await _alter_topic(call, topic, new, delete)


async def incremental_alter_configs(call: KafkaCall) -> KafkaAnswer:
    """IncrementalAlterConfigs v0-1."""
    return await _per_resource(call, _change_configs)


async def _per_resource(
    call: KafkaCall, alter: Callable[[KafkaCall, dict[str, Any]], Awaitable[NativeOutcome]]
) -> KafkaAnswer:
    responses = []
    for resource in call.body["resources"]:
        try:
            outcome = await alter(call, resource)
        except Exception as exc:
            outcome = failed_outcome("alter_configs", exc)
        responses.append(_result(resource, outcome))
    return {"throttle_time_ms": 0, "responses": responses}


# Topic resources: the native rows' rights; broker resources: the config right on
# the cluster, checked here.
_DESCRIBE = Requires(each=Right(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER))
_ALTER = Requires(each=Right(Operation.ALTER_CONFIGS, ResourceType.CLUSTER))
CONFIG_HANDLERS: dict[int, KafkaApi] = {
    DESCRIBE_CONFIGS.key: KafkaApi(describe_configs, _DESCRIBE, via=("describe_configs",)),
    ALTER_CONFIGS.key: KafkaApi(alter_configs, _ALTER, via=("alter_configs",)),
    INCREMENTAL_ALTER_CONFIGS.key: KafkaApi(
        incremental_alter_configs, _ALTER, via=("alter_configs",)
    ),
}
