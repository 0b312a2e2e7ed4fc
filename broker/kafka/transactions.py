"""Kafka's transaction APIs on the transaction coordinator (broker/transactions/).

AddPartitionsToTxn (24; v0-3 a client's, v4 a broker's verify-only batch of KIP-890
part 1), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27; what
`kafka-transactions.sh abort` sends the partition leader), TxnOffsetCommit (28),
DescribeProducers (61), DescribeTransactions (65), ListTransactions (66).
InitProducerId with a transactional id is in broker/kafka/producer_ids.py,
FindCoordinator for key type 1 in broker/kafka/groups.py.

Served up to the versions of transactions version 1 (no KIP-890 part 2: EndTxn
v5, AddPartitionsToTxn v5 and TxnOffsetCommit v5 are not advertised), so clients
add partitions themselves. Errors by version as Kafka's KafkaApis answers them:
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for clients too old to know it
(AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before v2).
"""

from __future__ import annotations

from typing import Any

from broker.authz.access import allows as allowed
from broker.authz.access import permits
from broker.groups.messages import OffsetCommitRequest
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.security.acl import Operation, ResourceType
from broker.security.requires import LOGGED_IN, Requires, Right, on_cluster
from broker.transactions.state import TopicPartition, TxnState
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)
from protocol.offsets_schema import INTERNAL_TOPICS, MAX_METADATA_CHARS

__all__ = [
    "DESCRIBE_TRANSACTIONAL_ID",
    "HANDLERS",
    "WRITE_TRANSACTIONAL_ID",
    "fenced_for",
    "transactional_id_permitted",
]

E = KafkaError
# The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_MIN_VERSION = 2
# AddPartitionsToTxn versions with a batch of transactions (KIP-890 part 1).
BATCHED_MIN_VERSION = 4

WRITE_TRANSACTIONAL_ID = _WRITE_TID = Right(Operation.WRITE, ResourceType.TRANSACTIONAL_ID)
DESCRIBE_TRANSACTIONAL_ID = _DESCRIBE_TID = Right(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)
_WRITE_TOPIC = Right(Operation.WRITE, ResourceType.TOPIC)
_READ_TOPIC = Right(Operation.READ, ResourceType.TOPIC)
_READ_GROUP = Right(Operation.READ, ResourceType.GROUP)


def transactional_id_permitted(call: KafkaCall, right: Right, tid: str) -> bool:
    """Kafka's check on the TransactionalId resource (Write to use an id, Describe to
    see it). Every transaction API asks it beside the rights its row declares (a row
    declares one whole-request and one per-entry right; these APIs need a third), so
    it goes to the authorizer directly; audited and counted like the others."""
    return permits(call.ctx, call.request.api.name, right, tid)


def fenced_for(error: KafkaError, version: int, min_version: int) -> KafkaError:
    """PRODUCER_FENCED as a client of `version` understands it."""
    if error is E.PRODUCER_FENCED and version < min_version:
        return E.INVALID_PRODUCER_EPOCH
    return error


def _partition_error(call: KafkaCall, topic: str, partition: int) -> KafkaError | None:
    manager = call.ctx.manager
    if topic in INTERNAL_TOPICS:
        return E.INVALID_REQUEST  # no client writes an internal topic in a transaction
    if topic not in manager.topics() or not 0 <= partition < manager.partition_count(topic):
        return E.UNKNOWN_TOPIC_OR_PARTITION
    if not call.permits(_WRITE_TOPIC, topic):
        return E.TOPIC_AUTHORIZATION_FAILED
    return None


def _topic_results(
    errors: dict[TopicPartition, KafkaError],
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": error.code}
        )
    return [{"name": t, "results_by_partition": parts} for t, parts in by_topic.items()]


async def _add_one(
    call: KafkaCall,
    tid: str,
    producer_id: int,
    epoch: int,
    topics: list[dict[str, Any]],
    verify_only: bool,
) -> dict[TopicPartition, KafkaError]:
    wanted = [(t["name"], p) for t in topics for p in t["partitions"]]
    service = call.ctx.transactions
    if not transactional_id_permitted(call, _WRITE_TID, tid):
        return dict.fromkeys(wanted, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if verify_only:
        return service.verify_partitions(tid, producer_id, epoch, wanted)
    problems = {tp: error for tp in wanted if (error := _partition_error(call, *tp)) is not None}
    if problems:  # Kafka adds none of them: the others are not attempted
        return {tp: problems.get(tp, E.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    error = await service.add_partitions(tid, producer_id, epoch, wanted)
    error = fenced_for(error, call.version, PRODUCER_FENCED_MIN_VERSION)
    return dict.fromkeys(wanted, error)


async def add_partitions_to_txn(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    if call.version < BATCHED_MIN_VERSION:
        errors = await _add_one(
            call,
            body["v3_and_below_transactional_id"],
            body["v3_and_below_producer_id"],
            body["v3_and_below_producer_epoch"],
            body["v3_and_below_topics"],
            verify_only=False,
        )
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(errors)}
    results = []
    for txn in body["transactions"]:
        errors = await _add_one(
            call,
            txn["transactional_id"],
            txn["producer_id"],
            txn["producer_epoch"],
            txn["topics"],
            verify_only=txn["verify_only"],
        )
        results.append(
            {"transactional_id": txn["transactional_id"], "topic_results": _topic_results(errors)}
        )
    return {"throttle_time_ms": 0, "error_code": E.NONE.code, "results_by_transaction": results}


async def add_offsets_to_txn(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    if not transactional_id_permitted(call, _WRITE_TID, body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code}
    error = await call.ctx.transactions.add_offsets(
        body["transactional_id"], body["producer_id"], body["producer_epoch"], body["group_id"]
    )
    error = fenced_for(error, call.version, PRODUCER_FENCED_MIN_VERSION)
    return {"throttle_time_ms": 0, "error_code": error.code}


async def end_txn(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    if not transactional_id_permitted(call, _WRITE_TID, body["transactional_id"]):
        return {"throttle_time_ms": 0, "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code}
    error = await call.ctx.transactions.end_txn(
        body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"]
    )
    error = fenced_for(error, call.version, PRODUCER_FENCED_MIN_VERSION)
    return {"throttle_time_ms": 0, "error_code": error.code}


async def txn_offset_commit(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    group = body["group_id"]
    offsets: dict[TopicPartition, tuple[int, str]] = {}
    bad: dict[TopicPartition, KafkaError] = {}
    for topic in body["topics"]:
        for p in topic["partitions"]:
            tp = (topic["name"], p["partition_index"])
            metadata = p["committed_metadata"] or ""
            manager = call.ctx.manager
            if len(metadata) > MAX_METADATA_CHARS:
                bad[tp] = E.OFFSET_METADATA_TOO_LARGE
            elif tp[0] not in manager.topics() or not 0 <= tp[1] < manager.partition_count(tp[0]):
                bad[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif not call.permits(_READ_TOPIC, tp[0]):
                bad[tp] = E.TOPIC_AUTHORIZATION_FAILED
            else:
                offsets[tp] = (p["committed_offset"], metadata)
    if not transactional_id_permitted(call, _WRITE_TID, body["transactional_id"]):
        error = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif offsets:
        request = OffsetCommitRequest(
            group_id=group,
            offsets=offsets,
            member_id=body.get("member_id", "") or "",
            generation_id=body.get("generation_id", -1),
            group_instance_id=body.get("group_instance_id"),
        )
        error = await call.ctx.transactions.txn_offset_commit(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], request
        )
    else:
        error = E.NONE
    return _offset_results({tp: error for tp in offsets} | bad)


def _offset_results(answers: dict[TopicPartition, KafkaError]) -> KafkaAnswer:
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, partition), err in answers.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "error_code": err.code}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    }


def _txn_offset_commit_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """The group's READ refused: every partition answers it (Kafka's answer)."""
    del message
    return _offset_results(
        {
            (t["name"], p["partition_index"]): error
            for t in call.body["topics"]
            for p in t["partitions"]
        }
    )


def _add_offsets_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    del call, message
    return {"throttle_time_ms": 0, "error_code": error.code}


async def write_txn_markers(call: KafkaCall) -> KafkaAnswer:
    """Markers from an admin (`kafka-transactions.sh abort`): one control batch per
    partition, durable before the answer."""
    results = []
    for marker in call.body["markers"]:
        errors = await call.ctx.transactions.write_markers(
            marker["producer_id"],
            marker["producer_epoch"],
            commit=marker["transaction_result"],
            coordinator_epoch=marker["coordinator_epoch"],
            partitions=[(t["name"], p) for t in marker["topics"] for p in t["partition_indexes"]],
        )
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": error.code}
            )
        results.append(
            {
                "producer_id": marker["producer_id"],
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"markers": results}


def _markers_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """ClusterAction refused: every partition of every marker answers it."""
    del message
    return {
        "markers": [
            {
                "producer_id": marker["producer_id"],
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "error_code": error.code}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in marker["topics"]
                ],
            }
            for marker in call.body["markers"]
        ]
    }


async def describe_producers(call: KafkaCall) -> KafkaAnswer:
    topics = []
    for topic in call.body["topics"]:
        parts = []
        for partition in topic["partition_indexes"]:
            parts.append(_producers_of(call, topic["name"], partition))
        topics.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _producers_of(call: KafkaCall, topic: str, partition: int) -> dict[str, Any]:
    manager = call.ctx.manager
    answer: dict[str, Any] = {
        "partition_index": partition,
        "error_code": E.NONE.code,
        "error_message": None,
        "active_producers": [],
    }
    if not call.permits(_READ_TOPIC, topic):
        answer["error_code"] = E.TOPIC_AUTHORIZATION_FAILED.code
    elif topic not in manager.topics() or not 0 <= partition < manager.partition_count(topic):
        answer["error_code"] = E.UNKNOWN_TOPIC_OR_PARTITION.code
    else:
        answer["active_producers"] = [
            {
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "last_sequence": s.last_sequence,
                "last_timestamp": s.last_timestamp,
                "coordinator_epoch": s.coordinator_epoch,
                "current_txn_start_offset": s.current_txn_start_offset,
            }
            for s in call.ctx.transactions.producer_states(topic, partition)
        ]
    return answer


def _state_entry(call: KafkaCall, tid: str) -> dict[str, Any]:
    meta = call.ctx.transactions.describe(tid)
    if meta is None:
        return {
            "error_code": E.TRANSACTIONAL_ID_NOT_FOUND.code,
            "transactional_id": tid,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return {
        "error_code": E.NONE.code,
        "transactional_id": tid,
        "transaction_state": meta.state.kafka_name,
        "transaction_timeout_ms": meta.timeout_ms,
        "transaction_start_time_ms": meta.start_ms,
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


async def describe_transactions(call: KafkaCall) -> KafkaAnswer:
    if not call.ctx.transactions.loaded:
        states = [
            {**_state_entry(call, tid), "error_code": E.COORDINATOR_LOAD_IN_PROGRESS.code}
            for tid in call.body["transactional_ids"]
        ]
    else:
        states = [
            _state_entry(call, tid)
            if transactional_id_permitted(call, _DESCRIBE_TID, tid)
            else {
                **_state_entry(call, ""),
                "transactional_id": tid,
                "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code,
            }
            for tid in call.body["transactional_ids"]
        ]
    return {"throttle_time_ms": 0, "transaction_states": states}


_STATES_BY_NAME = {state.kafka_name: state for state in TxnState}


async def list_transactions(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    wanted = set(body["state_filters"])
    unknown = sorted(name for name in wanted if name not in _STATES_BY_NAME)
    producers = set(body["producer_id_filters"])
    duration_ms = body.get("duration_filter", -1)
    service = call.ctx.transactions
    if not service.loaded:
        return {
            "throttle_time_ms": 0,
            "error_code": E.COORDINATOR_LOAD_IN_PROGRESS.code,
            "unknown_state_filters": unknown,
            "transaction_states": [],
        }
    now = call.ctx.clock_ms()
    states = []
    for meta in service.transactions():
        if wanted and meta.state.kafka_name not in wanted:
            continue
        if producers and meta.producer_id not in producers:
            continue
        if duration_ms >= 0 and not (meta.open and now - meta.start_ms > duration_ms):
            continue  # v1: open longer than the filter (Kafka's `durationFilter`)
        if not allowed(
            call.ctx, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id
        ):
            continue  # ids the principal may not describe are left out, as Kafka does
        states.append(
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.kafka_name,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": E.NONE.code,
        "unknown_state_filters": unknown,
        "transaction_states": states,
    }


_WRITE_TOPICS = Requires(each=_WRITE_TOPIC)
HANDLERS: dict[int, KafkaApi] = {
    ADD_PARTITIONS_TO_TXN.key: KafkaApi(add_partitions_to_txn, _WRITE_TOPICS, versions="0-4"),
    ADD_OFFSETS_TO_TXN.key: KafkaApi(
        add_offsets_to_txn,
        Requires(whole=_READ_GROUP, name_from="group_id"),
        _add_offsets_refused,
        versions="0-4",
    ),
    END_TXN.key: KafkaApi(end_txn, LOGGED_IN, versions="0-4"),
    TXN_OFFSET_COMMIT.key: KafkaApi(
        txn_offset_commit,
        Requires(whole=_READ_GROUP, name_from="group_id", each=_READ_TOPIC),
        _txn_offset_commit_refused,
        versions="0-4",
    ),
    WRITE_TXN_MARKERS.key: KafkaApi(
        write_txn_markers,
        on_cluster(Operation.CLUSTER_ACTION),
        _markers_refused,
        versions="0-1",
    ),
    DESCRIBE_PRODUCERS.key: KafkaApi(describe_producers, Requires(each=_READ_TOPIC)),
    DESCRIBE_TRANSACTIONS.key: KafkaApi(describe_transactions, LOGGED_IN),
    LIST_TRANSACTIONS.key: KafkaApi(list_transactions, LOGGED_IN, versions="0-1"),
}
