"""What checking a produced Kafka batch costs per record (`check_produced`), for docs/kafka.md.

    .venv/bin/python -m bench.produce_check_bench [--out FILE]

Batches as kafka-python's record builder writes them (keys null, as Kafka's perf
tool sends them; timestamps a few ms apart), 100-byte and 1 KiB values, filled to
Kafka's default `batch.size` (16 KiB) and to 256 KiB, uncompressed, lz4 and zstd;
each checked with a CreateTime topic's timestamp bounds. Also the import cost of
the record walker extension in a fresh interpreter. JSON on stdout (and in FILE).

CPU time of this process (best of 5), not wall time: the shared machines this runs
on are often loaded.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import timeit
import warnings
from collections.abc import Callable

from protocol.compression import Compression
from protocol.kafka import records as kafka
from protocol.kafka.produce_check import check_produced

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

NOW = 1_700_000_000_000
BATCH_BYTES = (16 << 10, 256 << 10)
VALUE_BYTES = (100, 1024)
CODECS = (Compression.NONE, Compression.LZ4, Compression.ZSTD)


def best_ns(fn: Callable[[], object], per: int) -> float:
    """Best-of-5 CPU nanoseconds per call, divided by `per`."""
    timer = timeit.Timer(fn, timer=time.process_time)
    number, _ = timer.autorange()
    return min(timer.repeat(5, number)) / number / per * 1e9


def build(value_bytes: int, batch_bytes: int, codec: Compression) -> tuple[bytes, int]:
    """A producer's batch of about `batch_bytes` of records, and its record count."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    count = max(1, batch_bytes // (value_bytes + 8))
    value = bytes(range(256)) * (value_bytes // 256) + bytes(value_bytes % 256)
    for i in range(count):
        builder.append(i, timestamp=NOW + i // 10, key=None, value=value, headers=[])
    return bytes(builder.build()), count


def fields_of(data: bytes) -> tuple[int, ...]:
    """The raw header as the ANY_LAYOUT walk gives it (Kafka's, leader epoch skipped)."""
    raw = kafka.HEADER.unpack_from(data, 0)
    return raw[:2] + raw[3:]


def check_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    bounds = (NOW - 7 * 86_400_000, NOW + 3_600_000)
    for value_bytes in VALUE_BYTES:
        for batch_bytes in BATCH_BYTES:
            for codec in CODECS:
                data, count = build(value_bytes, batch_bytes, codec)
                fields = fields_of(data)

                def check(data: bytes = data, fields: tuple[int, ...] = fields) -> None:
                    check_produced(
                        data,
                        0,
                        fields,
                        max_decompressed=64 << 20,
                        timestamp_bounds=bounds,
                        compacted=False,
                    )

                rows.append(
                    {
                        "value_bytes": value_bytes,
                        "batch_bytes": batch_bytes,
                        "codec": codec.name.lower(),
                        "records": count,
                        "ns_per_record": round(best_ns(check, count), 1),
                    }
                )
    return rows


def import_cost_us(module: str) -> float | None:
    """Best-of-5 wall µs to import `module` in a fresh interpreter (None: not built)."""
    code = (
        "import time; t = time.perf_counter(); import importlib; "
        f"importlib.import_module({module!r}); print(time.perf_counter() - t)"
    )
    best = None
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode:
            return None
        spent = float(done.stdout) * 1e6
        best = spent if best is None else min(best, spent)
    return None if best is None else round(best, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    result = {
        "bench": "produce_check",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "check_produced": check_rows(),
        "import_us": {
            "protocol.kafka._recordwalk": import_cost_us("protocol.kafka._recordwalk"),
        },
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
