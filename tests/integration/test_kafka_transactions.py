"""Kafka transactions end to end through the real broker process (docs/transactions.md).

confluent-kafka's transactional API (librdkafka: InitProducerId with a
transactional.id, FindCoordinator key_type 1, AddPartitionsToTxn, EndTxn,
AddOffsetsToTxn + TxnOffsetCommit via `send_offsets_to_transaction`) against
`tidelog serve`, read back by read_committed and read_uncommitted consumers; the
admin APIs (ListTransactions, DescribeTransactions, DescribeProducers,
WriteTxnMarkers) and OffsetFetch's require_stable on a raw Kafka socket.
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections.abc import Iterator

import confluent_kafka as ck
import pytest

import tidelog
from protocol.kafka.errors import KafkaError as E
from protocol.kafka.messages import (
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    OFFSET_FETCH,
    PRODUCE,
    WRITE_TXN_MARKERS,
)
from tests.conftest import BrokerProcess, start_broker
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S, KafkaSocket
from tests.integration.promserver import scrape
from tests.integration.test_cli import cli

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path_factory.mktemp("kafka-txn") / "data",
        "num.partitions=2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=200",
    )
    yield process
    process.stop()


def _topic(broker: BrokerProcess, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    with tidelog.Client(broker.bootstrap) as client:
        client.create_topic(name, partitions)
    return name


def _producer(broker: BrokerProcess, tid: str, **extra: object) -> ck.Producer:
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, **extra}
    producer = ck.Producer(config)
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def _read(broker: BrokerProcess, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value a fresh consumer with `isolation` reads up to the end of each partition."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == ck.KafkaError._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    assert len(at_end) == partitions, "the consumer did not reach the end of every partition"
    return values


def test_committed_visible_aborted_hidden_to_read_committed(broker: BrokerProcess) -> None:
    topic = _topic(broker)
    producer = _producer(broker, f"tx-{topic}")
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, key=b"%d" % i, value=b"commit-%d" % i)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, key=b"%d" % i, value=b"abort-%d" % i)
    producer.flush()
    producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, key=b"0", value=b"commit-again")
    producer.commit_transaction(CLIENT_TIMEOUT_S)

    committed = sorted([b"commit-%d" % i for i in range(6)] + [b"commit-again"])
    assert sorted(_read(broker, topic, "read_committed")) == committed
    everything = committed + [b"abort-%d" % i for i in range(6)]
    assert sorted(_read(broker, topic, "read_uncommitted")) == sorted(everything)


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(
    broker: BrokerProcess,
) -> None:
    topic = _topic(broker)
    tid = f"zombie-{topic}"
    old = _producer(broker, tid)
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush()
    new = _producer(broker, tid)  # aborts the open transaction, bumps the epoch
    new.begin_transaction()
    new.produce(topic, value=b"live")
    new.commit_transaction(CLIENT_TIMEOUT_S)
    with pytest.raises(ck.KafkaException) as raised:
        old.commit_transaction(CLIENT_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert _read(broker, topic, "read_committed") == [b"live"]
    assert sorted(_read(broker, topic, "read_uncommitted")) == [b"live", b"zombie"]


def _raw_init(sock: KafkaSocket, tid: str, timeout_ms: int = 60_000) -> dict:
    return sock.call(
        INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": tid,
            "transaction_timeout_ms": timeout_ms,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )


def test_init_producer_id_rules_on_the_wire(broker: BrokerProcess) -> None:
    with KafkaSocket((broker.host, broker.port)) as sock:
        found = sock.call(FIND_COORDINATOR, 3, {"key": "any-txn", "key_type": 1})
        assert (found["error_code"], found["node_id"], found["port"]) == (0, 1, broker.port)
        batch = sock.call(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["a", "b"]})
        assert [(c["key"], c["error_code"]) for c in batch["coordinators"]] == [("a", 0), ("b", 0)]
        too_long = _raw_init(sock, "rules", timeout_ms=900_001)
        assert too_long["error_code"] == E.INVALID_TRANSACTION_TIMEOUT.code
        first = _raw_init(sock, "rules")
        second = _raw_init(sock, "rules")
        assert first["error_code"] == second["error_code"] == 0
        assert second["producer_id"] == first["producer_id"]
        assert second["producer_epoch"] == first["producer_epoch"] + 1
        # v3+: naming an epoch that is not the current one is fenced
        stale = sock.call(
            INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": "rules",
                "transaction_timeout_ms": 60_000,
                "producer_id": first["producer_id"],
                "producer_epoch": first["producer_epoch"] - 1 if first["producer_epoch"] else 99,
            },
        )
        assert stale["error_code"] == E.PRODUCER_FENCED.code


def test_consume_transform_produce_commits_offsets_with_the_transaction(
    broker: BrokerProcess,
) -> None:
    source, sink = _topic(broker, 1), _topic(broker, 1)
    seed = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        seed.produce(source, value=b"in-%d" % i)
    seed.flush(CLIENT_TIMEOUT_S)
    group = f"eos-{source}"
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([ck.TopicPartition(source, 0, 0)])
    producer = _producer(broker, f"eos-{sink}")
    got = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < 4 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
    assert len(got) == 4
    producer.begin_transaction()
    for message in got:
        producer.produce(sink, value=message.value().replace(b"in", b"out"))
    positions = [ck.TopicPartition(source, 0, got[-1].offset() + 1)]
    producer.send_offsets_to_transaction(
        positions, consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S
    )
    producer.flush()
    with KafkaSocket((broker.host, broker.port)) as sock:
        body = {
            "groups": [
                {
                    "group_id": group,
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": source, "partition_indexes": [0]}],
                }
            ],
            "require_stable": True,
        }
        pending = sock.call(OFFSET_FETCH, 8, body)["groups"][0]["topics"][0]["partitions"][0]
        assert pending["error_code"] == E.UNSTABLE_OFFSET_COMMIT.code
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        stable = sock.call(OFFSET_FETCH, 8, body)["groups"][0]["topics"][0]["partitions"][0]
        assert (stable["error_code"], stable["committed_offset"]) == (0, got[-1].offset() + 1)
    consumer.close()
    assert sorted(_read(broker, sink, "read_committed", 1)) == [b"out-%d" % i for i in range(4)]


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(
    broker: BrokerProcess,
) -> None:
    topic = _topic(broker)
    producer = _producer(broker, f"slow-{topic}", **{"transaction.timeout.ms": 1000})
    producer.begin_transaction()
    producer.produce(topic, value=b"too slow")
    producer.flush()
    time.sleep(2.5)  # the broker's timer runs every 200 ms
    with pytest.raises(ck.KafkaException):
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    assert _read(broker, topic, "read_committed") == []
    assert _read(broker, topic, "read_uncommitted") == [b"too slow"]


def test_list_and_describe_transactions_and_producers(broker: BrokerProcess) -> None:
    topic = _topic(broker, 1)
    tid = f"listed-{topic}"
    producer = _producer(broker, tid)
    producer.begin_transaction()
    producer.produce(topic, partition=0, value=b"open")
    producer.flush()
    with KafkaSocket((broker.host, broker.port)) as sock:
        listed = sock.call(
            LIST_TRANSACTIONS, 1,
            {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1},
        )  # fmt: skip
        ongoing = {t["transactional_id"]: t for t in listed["transaction_states"]}
        assert ongoing[tid]["transaction_state"] == "Ongoing"
        pid = ongoing[tid]["producer_id"]
        described = sock.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid, "nobody"]})
        state, missing = described["transaction_states"]
        assert (state["transaction_state"], state["producer_id"]) == ("Ongoing", pid)
        assert state["topics"] == [{"topic": topic, "partitions": [0]}]
        assert missing["error_code"] == E.TRANSACTIONAL_ID_NOT_FOUND.code
        producers = sock.call(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )["topics"][0]["partitions"][0]
        active = {p["producer_id"]: p for p in producers["active_producers"]}
        assert active[pid]["current_txn_start_offset"] == 0
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        described = sock.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] == "CompleteCommit"
        producers = sock.call(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )["topics"][0]["partitions"][0]
        active = {p["producer_id"]: p for p in producers["active_producers"]}
        assert active[pid]["current_txn_start_offset"] == -1


def _transactional_batch(producer_id: int, epoch: int, value: bytes) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=0, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def test_write_txn_markers_aborts_a_hanging_transaction(broker: BrokerProcess) -> None:
    """What `kafka-transactions.sh abort` does: DescribeProducers finds the hanging
    producer, WriteTxnMarkers aborts it on the partition, read_committed moves on."""
    topic = _topic(broker, 1)
    with KafkaSocket((broker.host, broker.port)) as sock:
        # a transactional batch no coordinator knows (no transactional id on the produce)
        idem = sock.call(
            INIT_PRODUCER_ID, 4,
            {"transactional_id": None, "transaction_timeout_ms": 60000,
             "producer_id": -1, "producer_epoch": -1},
        )  # fmt: skip
        pid, epoch = idem["producer_id"], idem["producer_epoch"]
        produced = sock.call(PRODUCE, 7, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": _transactional_batch(pid, epoch, b"hanging")}]}],
        })["responses"][0]["partition_responses"][0]  # fmt: skip
        assert produced["error_code"] == 0, produced
        producers = sock.call(
            DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]}
        )["topics"][0]["partitions"][0]["active_producers"]
        hanging = next(p for p in producers if p["producer_id"] == pid)
        assert hanging["current_txn_start_offset"] == 0
        answer = sock.call(WRITE_TXN_MARKERS, 1, {"markers": [{
            "producer_id": pid, "producer_epoch": epoch, "transaction_result": False,
            "topics": [{"name": topic, "partition_indexes": [0]}],
            "coordinator_epoch": hanging["coordinator_epoch"],
        }]})  # fmt: skip
        result = answer["markers"][0]["topics"][0]["partitions"][0]
        assert result == {"partition_index": 0, "error_code": 0}
    seed = ck.Producer({"bootstrap.servers": broker.bootstrap})
    seed.produce(topic, partition=0, value=b"after")
    seed.flush(CLIENT_TIMEOUT_S)
    assert _read(broker, topic, "read_committed", 1) == [b"after"]


def test_cli_and_metrics_show_an_open_transaction(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = _topic(broker, 1)
    tid = f"shown-{topic}"
    producer = _producer(broker, tid)
    producer.begin_transaction()
    producer.produce(topic, partition=0, value=b"open")
    producer.flush()
    status, out, _ = cli(broker, capsys, "transactions", "list", "--state", "Ongoing")
    assert status == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows[tid][2] == "Ongoing"
    status, out, _ = cli(broker, capsys, "transactions", "describe", tid, "--format", "json")
    described = json.loads(out)
    assert (status, described["state"]) == (0, "Ongoing")
    assert described["partitions"] == [{"topic": topic, "partition": 0}]
    metrics = scrape(broker.metrics_port)
    assert metrics.value("tidelog_transactions_open") >= 1
    assert metrics.value("tidelog_partition_lso_lag", topic=topic, partition="0") == 1
    committed_before = metrics.value("tidelog_transactions_committed_total")
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    metrics = scrape(broker.metrics_port)
    assert metrics.value("tidelog_transactions_committed_total") == committed_before + 1
    assert not metrics.series("tidelog_partition_lso_lag").get(
        frozenset({("topic", topic), ("partition", "0")})
    )
    status, _, err = cli(broker, capsys, "transactions", "describe", "nobody")
    assert status != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in err


def test_partition_verification_kip_890_part_1(broker: BrokerProcess) -> None:
    """AddPartitionsToTxn v4 verify_only answers whether a partition is in the open
    transaction; the Kafka produce asks the same, so a transactional batch for a
    partition never added is refused INVALID_TXN_STATE (nothing opens there)."""
    from protocol.kafka.messages import ADD_PARTITIONS_TO_TXN

    topic = _topic(broker, 2)
    tid = f"verify-{topic}"
    with KafkaSocket((broker.host, broker.port)) as sock:
        init = _raw_init(sock, tid)
        pid, epoch = init["producer_id"], init["producer_epoch"]
        added = sock.call(ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        })  # fmt: skip
        codes = added["results_by_topic_v3_and_below"][0]["results_by_partition"]
        assert [c["partition_error_code"] for c in codes] == [0]
        verified = sock.call(ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "verify_only": True, "topics": [{"name": topic, "partitions": [0, 1]}],
        }]})  # fmt: skip
        results = verified["results_by_transaction"][0]["topic_results"][0]
        by_partition = {
            r["partition_index"]: r["partition_error_code"] for r in results["results_by_partition"]
        }
        assert by_partition == {0: 0, 1: E.INVALID_TXN_STATE.code}

        def produce(partition: int) -> int:
            answer = sock.call(PRODUCE, 7, {
                "transactional_id": tid, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{
                    "index": partition,
                    "records": _transactional_batch(pid, epoch, b"p%d" % partition)}]}],
            })  # fmt: skip
            return int(answer["responses"][0]["partition_responses"][0]["error_code"])

        assert produce(0) == 0
        assert produce(1) == E.INVALID_TXN_STATE.code
