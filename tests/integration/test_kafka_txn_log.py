"""Transactions in the log through the Kafka listener (issue 36 items 3 and 4):
transactional batches produced over TCP with the Kafka wire protocol, markers
written through the storage seam (`Log.append_txn_marker`, what the coordinator
calls), then Fetch and ListOffsets with read_uncommitted and read_committed over TCP,
and a real client (confluent-kafka's consumer with `isolation.level`) reading it.

The broker runs in this trio run (`inprocess_broker`): the test reaches its log
manager for the markers; every read goes over loopback TCP."""

from __future__ import annotations

import struct
from typing import Any

import confluent_kafka
import pytest
import trio

import tidelog
from protocol.batch import KAFKA_LAYOUT, iter_records
from protocol.kafka import records as kafka
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import FETCH, LIST_OFFSETS, PRODUCE
from tests.integration.kafka_helpers import KafkaSocket

pytestmark = [pytest.mark.integration]

TS = 1_700_000_000_000
_FIELDS = struct.Struct(">hiqqqhii")  # attributes .. record_count


def txn_batch(
    values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1), *, txn: bool = True
) -> bytes:
    """A Kafka v2 batch from our own records builder, transactional bit set when `txn`."""
    producer_id, epoch, sequence = producer
    payload = kafka.encode_records([(i, 0, b"k", v, ()) for i, v in enumerate(values)])
    fields = _FIELDS.pack(
        kafka.TRANSACTIONAL_MASK if txn else 0,
        len(values) - 1,
        TS,
        TS,
        producer_id,
        epoch,
        sequence,
        len(values),
    )
    return kafka.assemble_batch(payload, fields)


def produce(sock: KafkaSocket, topic: str, records: bytes, txn_id: str | None) -> dict[str, Any]:
    body = {
        "transactional_id": txn_id,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return sock.call(PRODUCE, 8, body)["responses"][0]["partition_responses"][0]


def fetch(sock: KafkaSocket, topic: str, offset: int, isolation: int) -> dict[str, Any]:
    answer = sock.call(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip
    return answer["responses"][0]["partitions"][0]


def latest(sock: KafkaSocket, topic: str, isolation: int) -> int:
    answer = sock.call(LIST_OFFSETS, 5, {
        "replica_id": -1, "isolation_level": isolation,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}],
    })  # fmt: skip
    part = answer["topics"][0]["partitions"][0]
    assert part["error_code"] == 0
    return int(part["offset"])


def batches(records: bytes) -> list[tuple[int, int, int, list[bytes | None]]]:
    """(base offset, attributes, producer id, values) of each fetched v2 batch."""
    out = []
    pos = 0
    while pos < len(records):
        header = kafka.read_batch_header(records, pos)
        body = records[pos + kafka.HEADER_SIZE : pos + header.size]
        values = [r[3] for r in kafka.decode_records(bytes(body), header.record_count)]
        out.append((header.base_offset, header.attributes, header.producer_id, values))
        pos += header.size
    return out


def values(records: bytes, *, skip_control: bool = True) -> list[bytes | None]:
    return [
        v for _, attrs, _, vs in batches(records) if not (skip_control and attrs & 0x20) for v in vs
    ]


def consume(bootstrap: str, topic: str, isolation: str, want: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{isolation}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "api.version.request": True,
    })  # fmt: skip
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        for _ in range(60):
            for message in consumer.consume(num_messages=100, timeout=0.5):
                if message.error() is None:
                    got.append(message.value())
            if len(got) >= want:
                break
        return got
    finally:
        consumer.close()


async def test_read_committed_fetch_over_kafka(inprocess_broker: Any) -> None:
    manager = inprocess_broker.context.manager
    # The log's rules alone: without the coordinator's KIP-890 check, which would refuse
    # producer ids it never gave (tests/integration/test_kafka_transactions.py has it).
    manager.txn_verifier = None
    manager.create_topic("txn", 1)
    plog = manager.get_log("txn", 0)
    address = inprocess_broker.address
    p1, p2 = (1000, 0, 0), (2000, 3, 0)

    def step_one() -> tuple[dict[str, Any], ...]:
        with KafkaSocket(address) as sock:
            plain = produce(sock, "txn", txn_batch([b"plain-0"], txn=False), None)
            a1 = produce(sock, "txn", txn_batch([b"p1-a", b"p1-b"], p1), "t1")
            a2 = produce(sock, "txn", txn_batch([b"p2-a"], p2), "t2")
            after = produce(sock, "txn", txn_batch([b"plain-1"], txn=False), None)
            return plain, a1, a2, after, fetch(sock, "txn", 0, 1), fetch(sock, "txn", 0, 0)

    plain, a1, a2, after, committed, uncommitted = await trio.to_thread.run_sync(step_one)
    assert [r["error_code"] for r in (plain, a1, a2, after)] == [0, 0, 0, 0]
    assert [r["base_offset"] for r in (plain, a1, a2, after)] == [0, 1, 3, 4]
    # Open transactions from offset 1: read_committed stops there.
    assert committed["last_stable_offset"] == 1 and committed["high_watermark"] == 5
    assert values(committed["records"]) == [b"plain-0"]
    assert committed["aborted_transactions"] == []
    assert uncommitted["last_stable_offset"] == 1
    assert uncommitted["aborted_transactions"] is None
    assert values(uncommitted["records"]) == [b"plain-0", b"p1-a", b"p1-b", b"p2-a", b"plain-1"]

    abort_at = plog.append_txn_marker(1000, 0, commit=False, coordinator_epoch=0, append_time_ms=TS)
    assert abort_at == 5 and plog.last_stable_offset == 3  # p2 still open
    commit_at = plog.append_txn_marker(2000, 3, commit=True, coordinator_epoch=0, append_time_ms=TS)
    assert commit_at == 6 and plog.last_stable_offset == 7

    def step_two() -> tuple[Any, ...]:
        with KafkaSocket(address) as sock:
            return (
                fetch(sock, "txn", 0, 1),
                fetch(sock, "txn", 4, 1),
                fetch(sock, "txn", 0, 0),
                latest(sock, "txn", 1),
                latest(sock, "txn", 0),
            )

    committed, tail, uncommitted, lso, hw = await trio.to_thread.run_sync(step_two)
    assert committed["last_stable_offset"] == 7
    assert committed["aborted_transactions"] == [{"producer_id": 1000, "first_offset": 1}]
    stored = batches(committed["records"])
    assert [(b[0], b[1] & 0x30) for b in stored] == [
        (0, 0), (1, 0x10), (3, 0x10), (4, 0), (5, 0x30), (6, 0x30)
    ]  # fmt: skip
    assert tail["aborted_transactions"] == [{"producer_id": 1000, "first_offset": 1}]
    assert uncommitted["aborted_transactions"] is None
    assert (lso, hw) == (7, 7)

    # A real client: confluent-kafka drops the aborted records by the list.
    bootstrap = f"{address[0]}:{address[1]}"
    got_committed = await trio.to_thread.run_sync(consume, bootstrap, "txn", "read_committed", 3)
    assert got_committed == [b"plain-0", b"p2-a", b"plain-1"]
    got_all = await trio.to_thread.run_sync(consume, bootstrap, "txn", "read_uncommitted", 5)
    assert got_all == [b"plain-0", b"p1-a", b"p1-b", b"p2-a", b"plain-1"]


async def test_fencing_and_txn_state_errors_over_kafka(inprocess_broker: Any) -> None:
    manager = inprocess_broker.context.manager
    # The log's rules alone: without the coordinator's KIP-890 check, which would refuse
    # producer ids it never gave (tests/integration/test_kafka_transactions.py has it).
    manager.txn_verifier = None
    manager.create_topic("fence", 1)
    plog = manager.get_log("fence", 0)
    address = inprocess_broker.address

    def produce_all(*sent: tuple[bytes, str | None]) -> list[int]:
        with KafkaSocket(address) as sock:
            return [produce(sock, "fence", b, t)["error_code"] for b, t in sent]

    codes = await trio.to_thread.run_sync(
        produce_all,
        (txn_batch([b"a"], (7, 2, 0)), "t"),
        (txn_batch([b"old"], (7, 1, 0)), "t"),  # an older epoch: fenced
        (txn_batch([b"plain"], (7, 2, 1), txn=False), None),  # txn open: not transactional
        (txn_batch([b"no-pid"], (-1, -1, -1)), "t"),  # transactional without producer id
    )
    assert codes == [
        0,
        KafkaError.INVALID_PRODUCER_EPOCH.code,
        KafkaError.INVALID_TXN_STATE.code,
        KafkaError.INVALID_RECORD.code,
    ]
    plog.append_txn_marker(7, 2, commit=True, coordinator_epoch=5, append_time_ms=TS)
    from protocol.errors import InvalidProducerEpoch, TransactionCoordinatorFenced

    with pytest.raises(TransactionCoordinatorFenced):
        plog.append_txn_marker(7, 2, commit=True, coordinator_epoch=4, append_time_ms=TS)
    with pytest.raises(InvalidProducerEpoch):
        plog.append_txn_marker(7, 1, commit=True, coordinator_epoch=5, append_time_ms=TS)
    assert plog.last_stable_offset == plog.high_watermark == 2


def _prepare(manager: Any, topic: str) -> Any:
    """plain(0) p1-a,p1-b(1-2, aborted) p2-a(3, committed) plain(4) abort(5) commit(6)
    p3-open(7, open): the LSO is 7, the high watermark 8."""
    manager.create_topic(topic, 1)
    plog = manager.get_log(topic, 0)
    plog.append(txn_batch([b"plain-0"], txn=False), layout=KAFKA_LAYOUT)
    plog.append(txn_batch([b"p1-a", b"p1-b"], (1000, 0, 0)), layout=KAFKA_LAYOUT)
    plog.append(txn_batch([b"p2-a"], (2000, 0, 0)), layout=KAFKA_LAYOUT)
    plog.append(txn_batch([b"plain-1"], txn=False), layout=KAFKA_LAYOUT)
    plog.append_txn_marker(1000, 0, commit=False, coordinator_epoch=0, append_time_ms=TS)
    plog.append_txn_marker(2000, 0, commit=True, coordinator_epoch=0, append_time_ms=TS)
    plog.append(txn_batch([b"p3-open"], (3000, 0, 0)), layout=KAFKA_LAYOUT)
    assert (plog.last_stable_offset, plog.high_watermark) == (7, 8)
    return plog


async def test_msgpack_readers_honour_isolation(inprocess_broker: Any) -> None:
    """The msgpack fetch's isolation_level, raw and through tidelog's Consumer."""
    _prepare(inprocess_broker.context.manager, "mp")
    bootstrap = f"{inprocess_broker.address[0]}:{inprocess_broker.address[1]}"

    def raw(isolation: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "topics": [{"topic": "mp", "partitions": [
                {"partition": 0, "offset": 0, "max_bytes": 1 << 20}]}],
        }  # fmt: skip
        if isolation is not None:
            body["isolation_level"] = isolation
        with tidelog.Client(bootstrap) as client:
            answer = client.request("fetch", body)
        return answer["topics"][0]["partitions"][0]

    def consumed(isolation: str | None) -> list[bytes | None]:
        kwargs = {} if isolation is None else {"isolation_level": isolation}
        consumer = tidelog.Consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            consumer_timeout_ms=1500, **kwargs,
        )  # fmt: skip
        try:
            consumer.assign([tidelog.TopicPartition("mp", 0)])
            return [r.value for r in consumer]
        finally:
            consumer.close()

    default, uncommitted, committed = await trio.to_thread.run_sync(
        lambda: (raw(None), raw(0), raw(1))
    )
    # Without the field (or 0): none of the extension's keys is answered.
    for key in ("last_stable_offset", "aborted_transactions", "next_offset"):
        assert default.get(key) is None and uncommitted.get(key) is None
    all_values = [b"plain-0", b"p1-a", b"p1-b", b"p2-a", b"plain-1", b"p3-open"]
    assert [r.value for r in iter_records(default["records"])] == all_values  # no markers
    assert uncommitted["records"] == default["records"]
    assert committed["last_stable_offset"] == 7
    assert committed["aborted_transactions"] == [{"producer_id": 1000, "first_offset": 1}]
    assert [r.value for r in iter_records(committed["records"])] == [
        b"plain-0",
        b"p2-a",
        b"plain-1",
    ]
    assert committed["next_offset"] == 7

    assert await trio.to_thread.run_sync(consumed, None) == all_values  # Kafka's default
    assert await trio.to_thread.run_sync(consumed, "read_uncommitted") == all_values
    assert await trio.to_thread.run_sync(consumed, "read_committed") == [
        b"plain-0", b"p2-a", b"plain-1"
    ]  # fmt: skip


async def test_msgpack_answers_without_isolation_keep_their_keys(inprocess_broker: Any) -> None:
    """The existing contract byte for byte: a fetch without `isolation_level` (or 0),
    or a metadata request, answers exactly the keys it did before issue 36."""
    from tests.broker.rawconn import RawConn

    _prepare(inprocess_broker.context.manager, "raw")
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        fetch_body = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                      "topics": [{"topic": "raw", "partitions": [
                          {"partition": 0, "offset": 0, "max_bytes": 1 << 20}]}]}  # fmt: skip
        for extra in ({}, {"isolation_level": 0}, {"kafka_batches": True}):
            answer = await conn.call("fetch", {**fetch_body, **extra})
            (part,) = answer["body"]["topics"][0]["partitions"]
            assert set(part) == {"partition", "error", "message", "high_watermark",
                                 "log_start_offset", "records"}  # fmt: skip
        committed = await conn.call("fetch", {**fetch_body, "isolation_level": 1})
        (part,) = committed["body"]["topics"][0]["partitions"]
        assert {"last_stable_offset", "aborted_transactions", "next_offset"} <= set(part)
        meta = await conn.call("metadata", {"topics": ["raw"]})
        (p,) = meta["body"]["topics"][0]["partitions"]
        assert p["last_stable_offset"] == 7  # only while a transaction is open


async def test_tidelog_consume_isolation_flag(
    inprocess_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker.cli.main import main as tidelog_main

    _prepare(inprocess_broker.context.manager, "cli")
    bootstrap = f"{inprocess_broker.address[0]}:{inprocess_broker.address[1]}"

    def run(*extra: str) -> list[str]:
        assert tidelog_main(["consume", "cli", "-b", bootstrap, *extra]) == 0
        # The in-process broker logs to stdout too: its lines start with the date.
        return [line for line in capsys.readouterr().out.splitlines() if line[:2] != "20"]

    assert await trio.to_thread.run_sync(run) == [
        "plain-0", "p1-a", "p1-b", "p2-a", "plain-1", "p3-open"
    ]  # fmt: skip
    assert await trio.to_thread.run_sync(run, "--isolation-level", "read_committed") == [
        "plain-0", "p2-a", "plain-1"
    ]  # fmt: skip


async def test_the_kip_890_verifier_hook_is_asked_for_transactional_batches(
    inprocess_broker: Any,
) -> None:
    manager = inprocess_broker.context.manager
    manager.create_topic("verify", 1)
    asked: list[tuple[str, int, int, str, int]] = []

    def verifier(txn_id: str, pid: int, epoch: int, topic: str, partition: int) -> str | None:
        asked.append((txn_id, pid, epoch, topic, partition))
        return None if txn_id == "added" else "INVALID_TXN_STATE"

    manager.txn_verifier = verifier

    def produce_all() -> list[int]:
        with KafkaSocket(inprocess_broker.address) as sock:
            return [
                produce(sock, "verify", txn_batch([b"x"], (5, 0, 0)), "not-added")["error_code"],
                produce(sock, "verify", txn_batch([b"y"], (5, 0, 0)), "added")["error_code"],
                produce(sock, "verify", txn_batch([b"z"], txn=False), None)["error_code"],
            ]

    codes = await trio.to_thread.run_sync(produce_all)
    assert codes == [KafkaError.INVALID_TXN_STATE.code, 0, 0]
    assert asked == [("not-added", 5, 0, "verify", 0), ("added", 5, 0, "verify", 0)]
    assert manager.get_log("verify", 0).high_watermark == 2
