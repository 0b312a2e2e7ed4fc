"""Requests as the clients' own request builders make them, end to end through the codec.

aiokafka's high-level request classes build the versioned structs its sender
writes; its record builder makes the batches. We decode those requests, convert
their batches, and answer with responses aiokafka's structs decode, the way a
broker will once the codec is wired in.
"""

from __future__ import annotations

from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v11, FetchResponse_v11
from aiokafka.protocol.metadata import MetadataRequest, MetadataRequest_v5
from aiokafka.protocol.produce import ProduceRequest, ProduceRequest_v7
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from harness.kafka_python import kp_class
from protocol import batch as tidelog
from protocol.compression import Compression
from protocol.kafka import (
    decode_request,
    encode_response,
    kafka_to_tidelog_all,
    tidelog_to_kafka_all,
)
from protocol.kafka.messages import FETCH


def _frame(struct, correlation_id: int) -> bytes:
    header = struct.build_request_header(correlation_id=correlation_id, client_id="aiokafka")
    return header.encode() + struct.encode()


def test_aiokafka_produce_v7_with_its_lz4_batch():
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=Compression.LZ4,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(50):
        builder.append(
            i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * i, headers=[]
        )
    records = bytes(builder.build())
    request = decode_request(
        _frame(
            ProduceRequest(None, -1, 30_000, [("events", [(3, records)])]).build(ProduceRequest_v7),
            9,
        )
    )
    assert (request.api.name, request.version, request.header.client_id) == (
        "Produce",
        7,
        "aiokafka",
    )
    assert (request.body["acks"], request.body["timeout_ms"]) == (-1, 30_000)
    (topic,) = request.body["topic_data"]
    (partition,) = topic["partition_data"]
    assert (topic["name"], partition["index"]) == ("events", 3)
    converted = kafka_to_tidelog_all(partition["records"])
    tidelog.validate_batch(converted, producer=True)
    got = [(r.offset, r.key, r.value) for r in tidelog.iter_records(converted)]
    assert got == [(i, b"k%d" % i, b"v" * i) for i in range(50)]


def test_aiokafka_metadata_v5_and_fetch_v11_requests():
    metadata = decode_request(
        _frame(MetadataRequest(["a", "b"], True).build(MetadataRequest_v5), 1)
    )
    assert [t["name"] for t in metadata.body["topics"]] == ["a", "b"]
    assert metadata.body["allow_auto_topic_creation"] is True
    fetch = decode_request(
        _frame(
            FetchRequest(500, 1, 52_428_800, 1, [("events", [(0, 42, 1_048_576)])]).build(
                FetchRequest_v11
            ),
            2,
        )
    )
    assert (fetch.body["max_wait_ms"], fetch.body["isolation_level"]) == (500, 1)
    (partition,) = fetch.body["topics"][0]["partitions"]
    assert (
        partition["partition"],
        partition["fetch_offset"],
        partition["partition_max_bytes"],
    ) == (0, 42, 1_048_576)
    assert fetch.body["session_id"] == 0 and fetch.body["session_epoch"] == -1


def test_fetch_v11_answer_read_by_aiokafka():
    stored = tidelog.encode_batch(
        [(b"k", b"v1", [("h", b"x")], 1000), (None, b"", [], 1001)], base_offset=40
    ) + tidelog.encode_batch([(b"k", None, [], 1002)], base_offset=42, compression=Compression.ZSTD)
    body = {
        "responses": [
            {
                "topic": "events",
                "partitions": [
                    {
                        "partition_index": 0,
                        "high_watermark": 43,
                        "last_stable_offset": 43,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": tidelog_to_kafka_all(stored),
                    }
                ],
            }
        ]
    }
    frame = encode_response(FETCH, 11, 7, body)
    response = FetchResponse_v11.decode(frame[8:])  # after size and correlation id
    (topic, partitions) = response.topics[0]
    partition = partitions[0]
    assert (topic, partition[0], partition[2]) == ("events", 0, 43)
    data = partition[-1]
    seen = []
    while data:
        size = 12 + int.from_bytes(data[8:12], "big")  # aiokafka reads one batch per buffer
        batch = DefaultRecordBatch(data[:size])
        assert batch.validate_crc()
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        data = data[size:]
    assert seen == [
        (40, 1000, b"k", b"v1", [("h", b"x")]),
        (41, 1001, None, b"", []),
        (42, 1002, b"k", None, []),
    ]


def test_kafka_python_flexible_api_versions_v3_request():
    message = kp_class(18, True)[3](
        client_software_name="kafka-python", client_software_version="3.0.12"
    )
    message.with_header(correlation_id=5, client_id="kafka-python")
    request = decode_request(bytes(message.encode(header=True, framed=True))[4:])
    assert request.body == {
        "client_software_name": "kafka-python",
        "client_software_version": "3.0.12",
        "cluster_id": None,  # v5's fields, at their defaults
        "node_id": -1,
    }
