"""The broker's CPU per record on the Kafka path: converting at the edge against storing
Kafka batches as sent (issue 35; docs/kafka.md "Storage decision").

    .venv/bin/python -m bench.kafka_store_cost

For 100-byte records in batches of a Java producer's default 16 KiB and of 1 MiB,
uncompressed and lz4, in one process, CPU time (best of 5):

- produce, before: `kafka_to_tidelog_all` then Tidelog's `validate_batch` of the result
  (what the edge and storage did); now: `check_produced` (Kafka's checks on the
  batch as sent);
- fetch, before: `tidelog_to_kafka_all` of the stored Tidelog batch; now: the header
  walk that finds the answer holds Kafka batches only (`protocol.layouts.layouts_of`),
  then nothing: the bytes (or a span of the file, by sendfile) go as they are;
- across protocols, now: a msgpack reader of Kafka-produced batches
  (`to_layout(..., MAGIC)`) and a Kafka reader of msgpack-produced ones.
"""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable

from protocol import batch as tidelog
from protocol.batch import ANY_LAYOUT, KAFKA_MAGIC, MAGIC, BatchWalk, Compression
from protocol.kafka.convert import kafka_to_tidelog_all, tidelog_to_kafka_all
from protocol.kafka.produce_check import check_produced
from protocol.layouts import layouts_of, to_layout

VALUE = b"x" * 100
BATCH_BYTES = (16 * 1024, 1 << 20)


def best_ns(fn: Callable[[], object], per: int) -> float:
    """Best-of-5 CPU nanoseconds per call, divided by `per` (records)."""
    timer = timeit.Timer(fn, timer=time.process_time)
    number, _ = timer.autorange()
    return min(timer.repeat(5, number)) / number / per * 1e9


def _batches(batch_bytes: int, codec: Compression) -> tuple[bytes, bytes, int]:
    """(Tidelog batch, the same records as a Kafka batch, records) of ~batch_bytes."""
    count = max(batch_bytes // (len(VALUE) + 10), 1)
    rows = [(None, VALUE, None, 1_700_000_000_000 + i) for i in range(count)]
    ours = tidelog.encode_batch(rows, compression=codec)
    theirs = tidelog_to_kafka_all(ours)
    return ours, theirs, count


def _check(theirs: bytes) -> None:
    for pos, fields in BatchWalk(theirs, layout=ANY_LAYOUT):
        check_produced(
            theirs, pos, fields, max_decompressed=1 << 26, timestamp_bounds=None, compacted=False
        )


def _convert_and_validate(theirs: bytes) -> None:
    converted = kafka_to_tidelog_all(theirs)
    tidelog.validate_batch(converted, 0, producer=True)


def rows() -> list[tuple[str, int, str, float, float]]:
    """(path, batch bytes, codec, before ns/record, now ns/record)."""
    out = []
    for batch_bytes in BATCH_BYTES:
        for codec in (Compression.NONE, Compression.LZ4):
            ours, theirs, n = _batches(batch_bytes, codec)
            name = codec.name.lower()
            out.append((
                "Kafka produce", batch_bytes, name,
                best_ns(lambda t=theirs: _convert_and_validate(t), n),
                best_ns(lambda t=theirs: _check(t), n),
            ))  # fmt: skip
            out.append((
                "Kafka fetch of Kafka-produced", batch_bytes, name,
                best_ns(lambda o=ours: tidelog_to_kafka_all(o), n),
                best_ns(lambda t=theirs: layouts_of(t), n),
            ))  # fmt: skip
            out.append((
                "msgpack fetch of Kafka-produced (cross)", batch_bytes, name,
                0.0, best_ns(lambda t=theirs: to_layout(t, MAGIC), n),
            ))  # fmt: skip
            out.append((
                "Kafka fetch of msgpack-produced (cross)", batch_bytes, name,
                best_ns(lambda o=ours: tidelog_to_kafka_all(o), n),
                best_ns(lambda o=ours: to_layout(o, KAFKA_MAGIC), n),
            ))  # fmt: skip
    return out


def main() -> None:
    print("| path | batch | codec | before ns/record | now ns/record |")
    print("|---|---:|---|---:|---:|")
    for path, batch_bytes, codec, before, now in rows():
        print(f"| {path} | {batch_bytes // 1024} KiB | {codec} | {before:,.0f} | {now:,.0f} |")


if __name__ == "__main__":
    main()
