"""Reads across tiers through the real broker process: a partition whose older
segments exist only in the bucket (a real S3 server, moto) answers every fetch, both
protocols, byte for byte as before they left the disk, across restarts; a store that
stops fails only the partitions that need it."""

from __future__ import annotations

import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest

from protocol.batch import encode_batch
from protocol.errors import RemoteStorageError
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import FETCH, LIST_OFFSETS, PRODUCE
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.kafka_helpers import KafkaSocket
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
        builder.append(n, timestamp=BASE_TS + (first + n) * 10, key=b"k", value=b"kafka" * 30, headers=[])
    return bytes(builder.build())


def _fill(broker: BrokerProcess) -> None:
    """`cold`: Tidelog and Kafka batches mixed, several segments; `hot`: a few records."""
    with Client(broker.bootstrap) as client:
        client.create_topic(COLD, 1, {"segment.bytes": SEGMENT_BYTES})
        client.create_topic(HOT, 1)
        client.produce(HOT, 0, encode_batch([(b"h", b"hot", None, BASE_TS)]))
    with KafkaSocket(broker.address) as sock:
        offset = 0
        for i in range(TIDELOG_BATCHES + KAFKA_BATCHES):
            if i % 4 == 3:
                records = _kafka_batch(offset)
                body = {
                    "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": COLD, "partition_data": [{"index": 0, "records": records}]}],
                }  # fmt: skip
                answer = sock.call(PRODUCE, 7, body)["responses"][0]["partition_responses"][0]
                assert answer["error_code"] == 0
            else:
                rows = [
                    (b"k", f"tidelog-{offset + n}".encode() * 8, None, BASE_TS + (offset + n) * 10)
                    for n in range(PER_BATCH)
                ]
                with Client(broker.bootstrap) as client:
                    client.produce(COLD, 0, encode_batch(rows))
            offset += PER_BATCH


def _fetch(client: Client, parts: list[tuple[str, int, int]], *, kafka: bool) -> list[dict]:
    """One msgpack fetch of (topic, offset, max_bytes) partitions; their answers in order."""
    topics: dict[str, list[dict]] = {}
    for topic, offset, max_bytes in parts:
        topics.setdefault(topic, []).append({"partition": 0, "offset": offset, "max_bytes": max_bytes})
    body = {
        "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 24, "kafka_batches": kafka,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
    }  # fmt: skip
    answer = client.request("fetch", body)
    by_topic = {t["topic"]: t["partitions"] for t in answer["topics"]}
    return [by_topic[topic].pop(0) for topic, _, _ in parts]


def _kafka_fetch(sock: KafkaSocket, parts: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    topics: dict[str, list[dict]] = {}
    for topic, offset in parts:
        topics.setdefault(topic, []).append({
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 8000})  # fmt: skip
    answer = sock.call(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip
    return {t["topic"]: t["partitions"][0] for t in answer["responses"]}


def _walk(broker: BrokerProcess) -> dict[str, Any]:
    """Everything a reader can see of `cold`, by every door."""
    seen: dict[str, Any] = {}
    with Client(broker.bootstrap) as client:
        for kafka in (True, False):
            answers, offset = [], 0
            while offset < RECORDS:
                (res,) = _fetch(client, [(COLD, offset, 3000)], kafka=kafka)
                assert res["error"] is None, res
                answers.append((offset, bytes(res["records"])))
                offset = _next(client, offset, res)
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
            part = _kafka_fetch(sock, [(COLD, offset)])[COLD]
            assert part["error_code"] == 0, part
            kafka_answers.append((offset, bytes(part["records"])))
            offset = _last_kafka_offset(part["records"]) + 1
        seen["kafka fetch"] = kafka_answers
        answer = sock.call(LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": COLD, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                for ts in (-2, -3, BASE_TS + 777)]}],
        })  # fmt: skip
        seen["kafka list offsets"] = [
            (p["error_code"], p["offset"], p["timestamp"]) for p in answer["topics"][0]["partitions"]
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


def _next(client: Client, offset: int, res: dict) -> int:
    from protocol.batch import iter_headers

    last = offset
    for header in iter_headers(bytes(res["records"])):
        last = header.base_offset + header.last_offset_delta
    return last + 1


def _last_kafka_offset(records: bytes) -> int:
    from protocol.batch import ANY_LAYOUT, F_BASE_OFFSET, F_LAST_OFFSET_DELTA, BatchWalk

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
    client: Any, bucket: str,
) -> tuple[BrokerProcess, dict[str, Any], list[dict]]:  # fmt: skip
    data = tmp_path / "data"
    broker = broker_factory(data_dir=data, extra_args=tuple(options), env=env)
    _fill(broker)
    before = _walk(broker)
    assert broker.stop() == 0
    entries = tier_out(client, bucket, data / f"{COLD}-0", keep_local=2)
    broker = broker_factory(data_dir=data, extra_args=tuple(options), env=env)
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
    assert broker.stop() == 0
    restarted = broker_factory(data_dir=broker.data_dir, extra_args=tuple(s3_server.broker_options()), env=s3_server.env)
    assert _walk(restarted) == before  # the cache was wiped: cold again, same answers
    assert _metrics(restarted)["tidelog_remote_cache_misses_total"] > 0


def test_a_store_that_stops_fails_only_the_partitions_that_need_it(
    broker_factory: BrokerFactory, tmp_path: Path, own_s3: Any
) -> None:
    broker, _, entries = _tiered(
        broker_factory, tmp_path, own_s3.broker_options(), own_s3.env, own_s3.client,
        own_s3.name,
    )  # fmt: skip
    local_offset = entries[-1]["end_offset"] + 1
    with Client(broker.bootstrap) as client:
        parts = [(COLD, 0, 4000), (HOT, 0, 4000), (COLD, local_offset, 4000)]
        served = _fetch(client, parts, kafka=True)
        assert [r["error"] for r in served] == [None, None, None]
        own_s3.stop()
        outage = _fetch(client, [(COLD, entries[1]["base_offset"], 4000), (HOT, 0, 4000)], kafka=True)
        assert outage[0]["error"] == RemoteStorageError.code and outage[0]["records"] in (b"", None)
        assert "object store" in outage[0]["message"]
        assert outage[1]["error"] is None and outage[1]["records"] == served[1]["records"]
        (local,) = _fetch(client, [(COLD, local_offset, 4000)], kafka=True)
        assert local["error"] is None and local["records"] == served[2]["records"]
        with pytest.raises(RemoteStorageError):
            client.offset_for_time(COLD, 0, BASE_TS + 50)
        assert client.offset_for_time(HOT, 0, BASE_TS) is not None
    with KafkaSocket(broker.address) as sock:
        parts = _kafka_fetch(sock, [(COLD, entries[2]["base_offset"]), (HOT, 0)])
        assert parts[COLD]["error_code"] == KAFKA_STORAGE_ERROR
        assert parts[HOT]["error_code"] == 0 and parts[HOT]["records"]
    assert _metrics(broker)["tidelog_remote_read_errors_total"] >= 2
