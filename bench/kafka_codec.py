"""Costs of the Kafka codec (protocol/kafka/), for docs/kafka.md.

    .venv/bin/python -m bench.kafka_codec    # ours, kafka-python, aiokafka (+ kio if installed)

Two tables:

1. Message codec: encode and decode of a Produce v7 request and a Fetch v11
   response with 10 partitions (1 KiB of records each), by our schema walker and
   by the schema libraries a Kafka broker in Python could use instead.
2. Batch conversion, per record: a Kafka v2 batch to a Tidelog batch and back,
   100-byte values, batches of 1 and 1000 records, uncompressed and lz4; beside
   it what storing Kafka batches natively would cost instead (Tidelog's own
   `validate_batch` on the produce path, aiokafka's Cython record reader).

Each number is the best of several timed runs, in CPU µs per operation or per record.
"""

from __future__ import annotations

import io
import time
import timeit
import warnings
from collections.abc import Callable

from protocol import batch as tidelog
from protocol.compression import Compression
from protocol.kafka import kafka_to_tidelog, tidelog_to_kafka
from protocol.kafka import validate_batch as validate_kafka_batch
from protocol.kafka.messages import FETCH, PRODUCE

PARTITIONS = 10
RECORDS_BYTES = 1024
VALUE_BYTES = 100


def best_us(fn: Callable[[], object], per: int = 1) -> float:
    """Best-of-5 CPU microseconds per call (divided by `per` for per-record costs).

    CPU time of this process, not wall time: the shared 2-core machines this runs
    on are often loaded, which inflates wall-clock timings but not CPU time.
    """
    timer = timeit.Timer(fn, timer=time.process_time)
    number, _ = timer.autorange()
    return min(timer.repeat(5, number)) / number / per * 1e6


def produce_body() -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": "events",
                "partition_data": [
                    {"index": i, "records": bytes(RECORDS_BYTES)} for i in range(PARTITIONS)
                ],
            }
        ],
    }


def fetch_body() -> dict:
    partition = {
        "error_code": 0,
        "high_watermark": 123_456,
        "last_stable_offset": 123_456,
        "log_start_offset": 0,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": bytes(RECORDS_BYTES),
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "events",
                "partitions": [{**partition, "partition_index": i} for i in range(PARTITIONS)],
            }
        ],
    }


def codec_rows() -> list[tuple[str, str, float, float]]:
    """(message, library, encode µs, decode µs)."""
    cases = [
        ("Produce v7 request", PRODUCE, 7, False, produce_body()),
        ("Fetch v11 response", FETCH, 11, True, fetch_body()),
    ]
    rows = []
    for label, api, version, response, body in cases:
        codec = api.codec(version, response)
        out = bytearray()
        codec.encode(body, out)
        wire = bytes(out)

        def ours_encode(codec=codec, body=body) -> None:
            codec.encode(body, bytearray())

        def ours_decode(codec=codec, wire=wire) -> None:
            codec.decode(memoryview(wire))

        rows.append((label, "tidelog (schema walker)", best_us(ours_encode), best_us(ours_decode)))
        rows.extend(_kafka_python_row(label, api.key, version, response, wire))
        rows.extend(_aiokafka_row(label, api.key, version, response, wire))
        rows.extend(_kio_row(label, version, response, wire))
    return rows


def _kafka_python_row(label, key, version, response, wire):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from harness.kafka_python import kp_class
    cls = kp_class(key, not response)[version]
    message = cls.decode(wire)
    message.with_header(correlation_id=0)
    return [
        (
            label,
            "kafka-python 3 (compiled schema)",
            best_us(message.encode),
            best_us(lambda: cls.decode(wire)),
        )
    ]


def _aiokafka_row(label, key, version, response, wire):
    from aiokafka.protocol.fetch import FetchResponse_v11
    from aiokafka.protocol.produce import ProduceRequest_v7

    cls = FetchResponse_v11 if response else ProduceRequest_v7
    assert (key, version) == (cls.API_KEY, cls.API_VERSION)
    message = cls.decode(wire)
    return [
        (
            label,
            "aiokafka (hand-written structs)",
            best_us(message.encode),
            best_us(lambda: cls.decode(wire)),
        )
    ]


def _kio_row(label, version, response, wire):
    try:
        from kio.schema.fetch.v11.response import FetchResponse
        from kio.schema.produce.v7.request import ProduceRequest
        from kio.serial import entity_reader, entity_writer
    except ImportError:
        return []
    cls = FetchResponse if response else ProduceRequest
    read = entity_reader(cls)
    write = entity_writer(cls)
    entity = read(wire, 0)[0]

    def encode() -> None:
        write(io.BytesIO(), entity)

    return [
        (
            label,
            "kio 0.6 (Rust reader, Python writer)",
            best_us(encode),
            best_us(lambda: read(wire, 0)),
        )
    ]


def conversion_rows() -> list[tuple[str, int, str, float]]:
    """(direction, records per batch, codec, µs per record)."""
    from aiokafka.record.default_records import DefaultRecordBatch as AioReader

    rows = []
    for count in (1, 1000):
        records = [(None, bytes(VALUE_BYTES), [], 1_700_000_000_000 + i) for i in range(count)]
        for codec in (Compression.NONE, Compression.LZ4):
            name = codec.name.lower()
            ours = tidelog.encode_batch(records, compression=codec)
            theirs, _ = tidelog_to_kafka(ours)
            rows.append(
                (
                    "Kafka -> Tidelog (produce edge)",
                    count,
                    name,
                    best_us(lambda theirs=theirs: kafka_to_tidelog(theirs), count),
                )
            )
            rows.append(
                (
                    "Tidelog -> Kafka (fetch edge)",
                    count,
                    name,
                    best_us(lambda ours=ours: tidelog_to_kafka(ours), count),
                )
            )
            rows.append(
                (
                    "Tidelog validate_batch (msgpack produce path)",
                    count,
                    name,
                    best_us(lambda ours=ours: tidelog.validate_batch(ours, producer=True), count),
                )
            )
            rows.append(
                (
                    "Kafka validate_batch, ours (native store: produce checks)",
                    count,
                    name,
                    best_us(lambda theirs=theirs: validate_kafka_batch(theirs), count),
                )
            )
            rows.append(
                (
                    "aiokafka Cython: CRC + record walk (native-store validation)",
                    count,
                    name,
                    best_us(lambda theirs=theirs: _check_natively(AioReader, theirs), count),
                )
            )
    return rows


def record_codec_rows() -> list[tuple[str, str, float]]:
    """(step, path, µs per record): Kafka varint records alone, 1000 per batch, both paths."""
    from protocol.kafka.records import decode_each, decode_records, encode_each, encode_records

    count = 1000
    rows = [(i, i, None, bytes(VALUE_BYTES), ()) for i in range(count)]
    data = encode_each(rows)
    return [
        ("decode", "per record", best_us(lambda: decode_each(data, count), count)),
        ("decode", "column-wise (numpy)", best_us(lambda: decode_records(data, count), count)),
        ("encode", "per record", best_us(lambda: encode_each(rows), count)),
        ("encode", "column-wise (numpy)", best_us(lambda: encode_records(rows), count)),
    ]


def _check_natively(reader: type, data: bytes) -> None:
    """What storing a Kafka batch as it is needs on produce: its CRC and every record read."""
    batch = reader(data)
    if not batch.validate_crc():
        raise ValueError("bad CRC")
    for _ in batch:
        pass


def main() -> None:
    print("| message | library | encode µs | decode µs |")
    print("|---|---|---:|---:|")
    for label, library, enc, dec in codec_rows():
        print(f"| {label} | {library} | {enc:.1f} | {dec:.1f} |")
    print()
    print("| path | records/batch | codec | µs/record |")
    print("|---|---:|---|---:|")
    for direction, count, codec, cost in conversion_rows():
        print(f"| {direction} | {count} | {codec} | {cost:.2f} |")
    print()
    print("| Kafka records, 1000 x 100 B | path | µs/record |")
    print("|---|---|---:|")
    for step, path, cost in record_codec_rows():
        print(f"| {step} | {path} | {cost:.2f} |")


if __name__ == "__main__":
    main()
