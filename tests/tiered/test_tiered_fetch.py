"""Reads across tiers through the real broker process: a partition whose older
segments exist only in the bucket (a real S3 server, moto) answers every fetch, both
protocols, byte for byte as before they left the disk, across restarts; a store that
stops fails only the partitions that need it."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest

from protocol.batch import ANY_LAYOUT, F_BASE_OFFSET, F_LAST_OFFSET_DELTA, BatchWalk, encode_batch
from protocol.errors import RemoteStorageError
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import FETCH, LIST_OFFSETS, PRODUCE
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.kafka_helpers import KafkaSocket
from tests.tiered.stall_proxy import StallProxy
from tests.tiered.tier_out import tier_out
from tidelog.client import Client
from tidelog.consumer import Consumer, TopicPartition

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = pytest.mark.integration

COLD, HOT = "cold", "hot"
SEGMENT_BYTES = 16 * 1024
BASE_TS = 1_700_000_000_000
TIDELOG_BATCHES, KAFKA_BATCHES, PER_BATCH = 30, 10, 20
RECORDS = (TIDELOG_BATCHES + KAFKA_BATCHES) * PER_BATCH
KAFKA_STORAGE_ERROR = ERRORS_BY_NAME["KAFKA_STORAGE_ERROR"].code


def _kafka_batch(first: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for n in range(PER_BATCH):
        builder.append(
            n, timestamp=BASE_TS + (first + n) * 10, key=b"k", value=b"kafka" * 30, headers=[]
        )
    return bytes(builder.build())


def _fill(broker: BrokerProcess) -> None:
    """`cold` (two partitions): Tidelog and Kafka batches mixed, several segments each;
    `hot`: one record, local only."""
    with Client(broker.bootstrap) as client:
        # A tiered topic (its start-up restores the log start from the manifest); its
        # uploader waits log.initial.task.delay.ms (30 s), so the test uploads first.
        cold = {"segment.bytes": SEGMENT_BYTES, "retention.ms": -1, "remote.storage.enable": True}
        client.create_topic(COLD, 2, cold)
        client.create_topic(HOT, 1)
        client.produce(HOT, 0, encode_batch([(b"h", b"hot", None, BASE_TS)]))
        with KafkaSocket(broker.address) as sock:
            for partition in (0, 1):
                _fill_partition(client, sock, partition)


def _fill_partition(client: Client, sock: KafkaSocket, partition: int) -> None:
    offset = 0
    for i in range(TIDELOG_BATCHES + KAFKA_BATCHES):
        if i % 4 == 3:
            records = _kafka_batch(offset)
            data = [{"name": COLD, "partition_data": [{"index": partition, "records": records}]}]
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": data}
            answer = sock.call(PRODUCE, 7, body)["responses"][0]["partition_responses"][0]
            assert answer["error_code"] == 0
        else:
            rows = [
                (b"k", f"tidelog-{offset + n}".encode() * 8, None, BASE_TS + (offset + n) * 10)
                for n in range(PER_BATCH)
            ]
            client.produce(COLD, partition, encode_batch(rows))
        offset += PER_BATCH


# (topic, partition, offset): one partition of a fetch.
Part = tuple[str, int, int]


def _fetch(client: Client, parts: list[Part], *, kafka: bool, max_bytes: int = 3000) -> list[dict]:
    """One msgpack fetch of `parts`; their answers in the same order."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append(
            {"partition": partition, "offset": offset, "max_bytes": max_bytes}
        )
    body = {
        "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "kafka_batches": kafka,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
    }  # fmt: skip
    answer = client.request("fetch", body)
    found = {(t["topic"], p["partition"]): p for t in answer["topics"] for p in t["partitions"]}
    return [found[(topic, partition)] for topic, partition, _ in parts]


def _kafka_fetch(sock: KafkaSocket, parts: list[Part]) -> list[dict[str, Any]]:
    """One Kafka Fetch (v11) of `parts`; their answers in the same order."""
    topics: dict[str, list[dict]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append({
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 8000})  # fmt: skip
    answer = sock.call(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip
    found = {
        (t["topic"], p["partition_index"]): p for t in answer["responses"] for p in t["partitions"]
    }
    return [found[(topic, partition)] for topic, partition, _ in parts]


def _walk(broker: BrokerProcess) -> dict[str, Any]:
    """Everything a reader can see of `cold`, by every door."""
    seen: dict[str, Any] = {}
    with Client(broker.bootstrap) as client:
        for kafka in (True, False):
            answers, offset = [], 0
            while offset < RECORDS:
                (res,) = _fetch(client, [(COLD, 0, offset)], kafka=kafka, max_bytes=7000)
                assert res["error"] is None, res
                answers.append((offset, bytes(res["records"])))
                offset = _last_offset(bytes(res["records"])) + 1
            seen[f"msgpack kafka_batches={kafka}"] = answers
        seen["offsets"] = [
            client.offset_for_time(COLD, 0, ts)
            for ts in (0, BASE_TS + 5, BASE_TS + 1234, BASE_TS + (RECORDS - 1) * 10)
        ]
        seen["max"] = client.list_offsets(COLD, 0, "max_timestamp")
        seen["earliest"] = client.list_offsets(COLD, 0, "earliest")
    with KafkaSocket(broker.address) as sock:
        kafka_answers, offset = [], 0
        while offset < RECORDS:
            (part,) = _kafka_fetch(sock, [(COLD, 0, offset)])
            assert part["error_code"] == 0, part
            kafka_answers.append((offset, bytes(part["records"])))
            offset = _last_offset(part["records"]) + 1
        seen["kafka fetch"] = kafka_answers
        answer = sock.call(LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": COLD, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                for ts in (-2, -3, BASE_TS + 777)]}],
        })  # fmt: skip
        seen["kafka list offsets"] = [
            (p["error_code"], p["offset"], p["timestamp"])
            for p in answer["topics"][0]["partitions"]
        ]
    with Consumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000) as consumer:
        consumer.assign([TopicPartition(COLD, 0)])
        consumer.seek_to_beginning()
        values = []
        for record in consumer:
            values.append((record.offset, record.value))
            if record.offset == RECORDS - 1:
                break
        seen["consumer"] = values
    return seen


def _last_offset(records: bytes) -> int:
    """The last offset of a run of stored batches (either layout)."""
    last = -1
    for _, fields in BatchWalk(records, whole=False, layout=ANY_LAYOUT):
        last = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA]
    return last


def _metrics(broker: BrokerProcess) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("tidelog_remote") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _tiered(
    broker_factory: BrokerFactory, tmp_path: Path, options: list[str], env: dict[str, str],
    client: Any, bucket: str, *, walk: bool = True,
) -> tuple[BrokerProcess, dict[str, Any], list[dict]]:  # fmt: skip
    """A broker whose `cold` partitions hold all but their two newest segments in the
    bucket only; what `_walk` saw before (with `walk`; else the first fetch only)."""
    data = tmp_path / "data"
    broker = broker_factory(*options, data_dir=data, env=env)
    _fill(broker)
    if walk:
        before = _walk(broker)
    else:
        with Client(broker.bootstrap) as reader:
            (first,) = _fetch(reader, [(COLD, 0, 0)], kafka=True)
        before = {"msgpack kafka_batches=True": [(0, bytes(first["records"]))]}
    assert broker.stop() == 0
    try:
        entries = tier_out(client, bucket, data / f"{COLD}-0", keep_local=2)
        tier_out(client, bucket, data / f"{COLD}-1", keep_local=2)
    finally:
        client.close()
    broker = broker_factory(*options, data_dir=data, env=env)
    return broker, before, entries


def test_reads_across_tiers_match_local_reads_through_both_protocols(
    broker_factory: BrokerFactory, tmp_path: Path, s3_server: Any
) -> None:
    client = s3_server.client()
    broker, before, entries = _tiered(
        broker_factory, tmp_path, s3_server.broker_options(), s3_server.env, client,
        s3_server.bucket,
    )  # fmt: skip
    assert len(entries) >= 3
    local_start = min(int(p.stem) for p in (broker.data_dir / f"{COLD}-0").glob("*.log"))
    assert local_start == entries[-1]["end_offset"] + 1 > 0
    with Client(broker.bootstrap) as client:
        local = client.list_offsets(COLD, 0, "earliest_local")
        assert local is not None and local.offset == local_start
    # Kafka's ListOffsets v9: -4 the local log start, -5 the highest offset in the bucket
    # (-1, epoch -1, for a partition with nothing uploaded), as KIP-405 defines them.
    tiers = {}
    with KafkaSocket(broker.address) as sock:
        for spec in (-4, -5):
            answer = sock.call(LIST_OFFSETS, 9, {
                "replica_id": -1, "isolation_level": 0,
                "topics": [{"name": name, "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": spec}]}
                    for name in (COLD, HOT)],
            })  # fmt: skip
            for t in answer["topics"]:
                (p,) = t["partitions"]
                tiers[(t["name"], spec)] = (p["error_code"], p["offset"], p["leader_epoch"])
    assert tiers == {
        (COLD, -4): (0, local_start, 0),
        (COLD, -5): (0, entries[-1]["end_offset"], 0),
        (HOT, -4): (0, 0, 0),
        (HOT, -5): (0, -1, -1),
    }
    cold = _walk(broker)
    assert cold == before
    assert cold["earliest"] == before["earliest"] and cold["earliest"].offset == 0
    assert [v for _, v in cold["consumer"]] == [v for _, v in before["consumer"]]
    assert len(cold["consumer"]) == RECORDS
    first = _metrics(broker)
    assert first["tidelog_remote_cache_misses_total"] > 0
    assert first["tidelog_remote_read_errors_total"] == 0
    assert first["tidelog_remote_read_duration_seconds_count"] > 0
    warm = _walk(broker)  # every chunk cached: no GET more
    second = _metrics(broker)
    assert warm == before
    assert second["tidelog_remote_gets_total"] == first["tidelog_remote_gets_total"]
    assert second["tidelog_remote_cache_hits_total"] > first["tidelog_remote_cache_hits_total"]
    assert 0 < second["tidelog_remote_cache_size_bytes"] <= sum(e["size_bytes"] for e in entries)


def test_a_failing_store_fails_only_the_partitions_that_need_it(
    broker_factory: BrokerFactory, tmp_path: Path, s3_server: Any
) -> None:
    """Through a forwarder in front of the S3 server: stalled (nothing answered), then
    down (connections refused). Only the remote partitions fail, retriably; the local
    ones of the same fetch, and other clients, are served; a stall ends and the same
    read succeeds."""
    host, port = s3_server.endpoint.removeprefix("http://").split(":")
    with StallProxy((host, int(port))) as proxy:
        s3 = dataclasses.replace(s3_server, endpoint=proxy.endpoint)
        options = [*s3.broker_options(), "tidelog.remote.fetch.timeout.ms=1500"]
        broker, before, entries = _tiered(
            broker_factory, tmp_path, options, s3.env, s3_server.client(), s3.bucket, walk=False
        )
        assert len(entries) >= 4
        local_offset = entries[-1]["end_offset"] + 1
        remote_offset = entries[1]["base_offset"] + 3
        with Client(broker.bootstrap) as client:
            # Two remote partitions and a local one in one fetch: all served.
            parts = [(COLD, 0, remote_offset), (COLD, 1, remote_offset), (HOT, 0, 0)]
            served = _fetch(client, parts, kafka=True, max_bytes=20_000)
            assert [r["error"] for r in served] == [None, None, None]
            assert served[0]["records"] == served[1]["records"]  # the same data in both
            (local,) = _fetch(client, [(COLD, 0, local_offset)], kafka=True)
            assert local["error"] is None and local["records"]
        _stalled(broker, proxy, before)
        proxy.close()  # the store is down: connections refused
        _down(broker, entries, served, local)
    assert _metrics(broker)["tidelog_remote_read_errors_total"] >= 4


def _stalled(broker: BrokerProcess, proxy: StallProxy, before: dict[str, Any]) -> None:
    proxy.stalled.set()
    done: list[str] = []
    sent = threading.Event()
    cold: list[dict] = []

    def read_cold() -> None:
        with Client(broker.bootstrap) as client:
            sent.set()
            cold.extend(_fetch(client, [(COLD, 0, 0), (HOT, 0, 0)], kafka=True))
            done.append("cold")

    reader = threading.Thread(target=read_cold)
    reader.start()
    sent.wait()
    with Client(broker.bootstrap) as client:  # another client, while the store hangs
        (hot,) = _fetch(client, [(HOT, 0, 0)], kafka=True)
        assert hot["error"] is None and hot["records"]
        done.append("hot")
    reader.join()
    assert done == ["hot", "cold"]  # the event loop never waited for the store
    assert cold[0]["error"] == RemoteStorageError.code
    assert "did not answer within 1.5 s" in cold[0]["message"]
    assert cold[1]["error"] is None and cold[1]["records"] == hot["records"]
    proxy.stalled.clear()  # the store answers again: the same read is served
    with Client(broker.bootstrap) as client:
        (again,) = _fetch(client, [(COLD, 0, 0)], kafka=True)
    assert again["error"] is None
    assert bytes(again["records"]) == before["msgpack kafka_batches=True"][0][1]


def _down(broker: BrokerProcess, entries: list[dict], served: list[dict], local: dict) -> None:
    local_offset = entries[-1]["end_offset"] + 1
    with Client(broker.bootstrap) as client:
        # Segments never read yet (their chunks and indexes are not cached).
        parts = [(COLD, 0, entries[2]["base_offset"]), (COLD, 1, 0), (HOT, 0, 0)]
        outage = _fetch(client, parts, kafka=True, max_bytes=20_000)
        for res in outage[:2]:
            assert res["error"] == RemoteStorageError.code, res
            assert "object store" in res["message"] and not res["records"]
        assert outage[2]["error"] is None and outage[2]["records"] == served[2]["records"]
        # Data still on disk is served from the same partition, and by time too; so is
        # remote data the chunk cache holds.
        (again,) = _fetch(client, [(COLD, 0, local_offset)], kafka=True)
        assert again["error"] is None and again["records"] == local["records"]
        remote_offset = entries[1]["base_offset"] + 3
        (cached,) = _fetch(client, [(COLD, 0, remote_offset)], kafka=True, max_bytes=20_000)
        assert cached["error"] is None and cached["records"] == served[0]["records"]
        with pytest.raises(RemoteStorageError):
            client.offset_for_time(COLD, 0, BASE_TS + 50)
        assert client.offset_for_time(HOT, 0, BASE_TS) is not None
    with KafkaSocket(broker.address) as sock:
        cold, hot = _kafka_fetch(sock, [(COLD, 1, entries[3]["base_offset"]), (HOT, 0, 0)])
        assert cold["error_code"] == KAFKA_STORAGE_ERROR and not cold["records"]
        assert hot["error_code"] == 0 and hot["records"]


def test_the_uploader_and_local_retention_leave_every_record_readable(
    broker_factory: BrokerFactory, tmp_path: Path, s3_server: Any
) -> None:
    """The acceptance path: the broker's own uploader copies rolled segments and local
    retention deletes their local copies; every record stays readable through both
    protocols, in order, across a restart, with the local disk bounded."""
    options = (
        *s3_server.broker_options(),
        "remote.log.manager.task.interval.ms=100",
        "log.initial.task.delay.ms=0",
    )
    data = tmp_path / "data"
    broker = broker_factory(*options, data_dir=data, env=s3_server.env)
    config = {
        "segment.bytes": SEGMENT_BYTES,
        "remote.storage.enable": "true",
        "local.retention.bytes": SEGMENT_BYTES,
        "retention.ms": -1,  # the records are from 2023: keep them in the store
    }
    with Client(broker.bootstrap) as client:
        client.create_topic(COLD, 1, config)
        client.create_topic(HOT, 1)
        with KafkaSocket(broker.address) as sock:
            _fill_partition(client, sock, 0)
        deadline = time.monotonic() + 30
        while (local := client.list_offsets(COLD, 0, "earliest_local")) is None or (
            local.offset < RECORDS // 2
        ):
            assert time.monotonic() < deadline, "local retention never deleted uploaded segments"
            time.sleep(0.1)
        assert client.list_offsets(COLD, 0, "earliest").offset == 0  # type: ignore[union-attr]
    local_bytes = sum(p.stat().st_size for p in (data / f"{COLD}-0").glob("*.log"))
    assert local_bytes <= 3 * SEGMENT_BYTES
    seen = _walk(broker)
    expected = [
        (offset, f"tidelog-{offset}".encode() * 8)
        for offset in range(RECORDS)
        if (offset // PER_BATCH) % 4 != 3
    ]
    assert [(o, v) for o, v in seen["consumer"] if not v.startswith(b"kafka")] == expected
    assert [o for o, _ in seen["consumer"]] == list(range(RECORDS))
    assert broker.stop() == 0
    restarted = broker_factory(*options, data_dir=data, env=s3_server.env)
    assert _walk(restarted) == seen
