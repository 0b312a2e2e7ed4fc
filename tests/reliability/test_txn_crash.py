"""kill -9 of the real broker during EndTxn: after the restart the transaction completes
with the client's result; no committed record is lost, no aborted one is read by a
read_committed consumer, the partitions' transactions are closed (LSO = HW), and the
transaction's TxnOffsetCommit is the group's committed offset exactly when it commits.

The broker dies at one of the coordinator's failpoints (broker/transactions/service.py):
with the Prepare* durable and no marker written, after the first marker, or with every
marker written and no Complete*. The restart loads `__transaction_state`, finds the
Prepare*, writes the (missing) markers and the Complete*, before it listens.
"""

from __future__ import annotations

import time
import uuid
import warnings
from pathlib import Path

import confluent_kafka as ck
import pytest

import tidelog
from protocol.kafka.messages import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    OFFSET_FETCH,
    PRODUCE,
    TXN_OFFSET_COMMIT,
)
from storage.failpoints import ENV_VAR
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S, KafkaSocket

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

TOPIC = "crash-txn"
GROUP = "crash-group"
PARTITIONS = 2
# Each point with the hit that falls in the second EndTxn (the first commits two
# partitions: `txn.markers.after_one` is hit twice by it).
POINTS = ("txn.end.before_markers@2", "txn.markers.after_one@3", "txn.end.before_complete@2")


def _batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20,
    )  # fmt: skip
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(builder.build())


def _transaction(
    sock: KafkaSocket, tid: str, pid: int, epoch: int, seq: int, values: list[bytes]
) -> None:
    """AddPartitionsToTxn for every partition, then one transactional batch on each."""
    added = sock.call(ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(range(PARTITIONS))}],
    })  # fmt: skip
    errors = [p["partition_error_code"] for t in added["results_by_topic_v3_and_below"]
              for p in t["results_by_partition"]]  # fmt: skip
    assert errors == [0] * PARTITIONS, added
    for partition in range(PARTITIONS):
        answer = sock.call(PRODUCE, 7, {
            "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{
                "index": partition, "records": _batch(pid, epoch, seq, values)}]}],
        })["responses"][0]["partition_responses"][0]  # fmt: skip
        assert answer["error_code"] == 0, answer


def _read(broker: BrokerProcess, isolation: str) -> list[bytes]:
    consumer = ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
        "isolation.level": isolation, "auto.offset.reset": "earliest",
        "enable.partition.eof": True, "enable.auto.commit": False,
    })  # fmt: skip
    consumer.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
@pytest.mark.parametrize("point", POINTS)
def test_kill_during_end_txn_then_restart_completes_it(
    broker_factory: BrokerFactory, tmp_path: Path, point: str, commit: bool
) -> None:
    data = tmp_path / "data"
    broker = broker_factory(data_dir=data, env={ENV_VAR: point.replace("@", "=kill@")})
    with tidelog.Client(broker.bootstrap) as client:
        client.create_topic(TOPIC, PARTITIONS)
    tid = "crashing"
    with KafkaSocket((broker.host, broker.port)) as sock:
        assert sock.call(FIND_COORDINATOR, 3, {"key": tid, "key_type": 1})["error_code"] == 0
        init = sock.call(INIT_PRODUCER_ID, 4, {
            "transactional_id": tid, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # one committed transaction first: it must survive whatever happens next
        _transaction(sock, tid, pid, epoch, 0, [b"kept-1", b"kept-2"])
        end = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch}
        assert sock.call(END_TXN, 3, {**end, "committed": True})["error_code"] == 0
        _transaction(sock, tid, pid, epoch, 2, [b"crash-1", b"crash-2"])
        # and its consumer offsets (what Kafka Streams commits with each transaction)
        added = sock.call(ADD_OFFSETS_TO_TXN, 3, {**end, "group_id": GROUP})
        assert added["error_code"] == 0, added
        offsets = sock.call(TXN_OFFSET_COMMIT, 3, {
            **end, "group_id": GROUP, "generation_id": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{
                "partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                "committed_metadata": "m"}]}],
        })  # fmt: skip
        assert offsets["topics"][0]["partitions"][0]["error_code"] == 0, offsets
        sock.send_raw(sock.request_bytes(END_TXN, 3, {**end, "committed": commit}))
        sock.recv_frame()  # the broker dies before or after it answers (the point decides)
    broker.proc.wait(timeout=CLIENT_TIMEOUT_S)
    assert broker.proc.returncode == -9, broker.output()

    restarted = broker_factory(data_dir=data)
    with KafkaSocket((restarted.host, restarted.port)) as sock:
        state = sock.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
        described = state["transaction_states"][0]
        assert described["transaction_state"] == ("CompleteCommit" if commit else "CompleteAbort")
        producers = sock.call(DESCRIBE_PRODUCERS, 0, {
            "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})  # fmt: skip
        for partition in producers["topics"][0]["partitions"]:
            for producer in partition["active_producers"]:
                assert producer["current_txn_start_offset"] == -1, partition
        # the transactional id works on: a new instance, a new epoch
        again = sock.call(INIT_PRODUCER_ID, 4, {
            "transactional_id": tid, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        assert (again["error_code"], again["producer_id"]) == (0, pid)
        assert again["producer_epoch"] == epoch + 1
        fetched = sock.call(OFFSET_FETCH, 7, {
            "group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "require_stable": True,
        })["topics"][0]["partitions"][0]  # fmt: skip
        assert fetched["error_code"] == 0, fetched
        assert fetched["committed_offset"] == (42 if commit else -1)

    kept = [b"kept-1", b"kept-2"] * PARTITIONS
    crashed = [b"crash-1", b"crash-2"] * PARTITIONS
    assert sorted(_read(restarted, "read_uncommitted")) == sorted(kept + crashed)
    expected = kept + crashed if commit else kept
    assert sorted(_read(restarted, "read_committed")) == sorted(expected)
