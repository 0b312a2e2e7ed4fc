"""Kafka's own `kafka-dump-log.sh` (DumpLogSegments) reads a Kafka-produced Tidelog
partition's files (issue 35 item 5): with `--deep-iteration --print-data-log` on the
`.log` files, and with `--verify-index-only` on the `.index` and `.timeindex` files, it
agrees with `tidelog dump-log` batch by batch and record by record (offsets, positions,
timestamps, sizes, CRCs, keys, values), and reports no index mismatch.

A librdkafka producer (idempotent, so batches carry producer ids and sequences) writes
batches of varied records, some compressed, into a topic whose small segments roll
often; only closed segments are dumped (an active segment's indexes are preallocated).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.cli.main import main as tidelog_main
from interop import java_tools
from interop.targets import Target

pytestmark = [pytest.mark.interop, pytest.mark.timeout(600)]

T0_MS = 1_790_000_000_000
TOPIC_CONFIG = {"segment.bytes": "2048", "index.interval.bytes": "300"}
# Batches per codec; batch i holds 2 + 3 * i records.
ROUNDS = 8

BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?position: (\d+) "
    r"(CreateTime|LogAppendTime): (-?\d+) size: (\d+) magic: (\d+) .*?compresscodec: (\w+) "
    r"crc: (0x[0-9a-f]+|\d+)"
)
RECORD = re.compile(
    r"^\| offset: (\d+) (CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) "
    r"valueSize: (-?\d+)(?: sequence: -?\d+)? headerKeys: \[([^\]]*)\](.*)$"
)
INDEX = re.compile(r"^offset: (\d+) position: (\d+)$")
TIME_INDEX = re.compile(r"^timestamp: (-?\d+) (?:\([^)]*\) )?offset: (\d+)$")


def produce(bootstrap: str, topic: str) -> int:
    """ROUNDS batches of varied records per codec (keys, null keys and values, headers);
    the number of records."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIG)])[topic].result(60)
    sent = 0
    for codec in ("none", "lz4", "zstd", "gzip"):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": codec,
                "linger.ms": 50,
            }
        )
        for round_ in range(ROUNDS):
            for i in range(2 + 3 * round_):
                n = sent + i
                producer.produce(
                    topic,
                    key=None if n % 7 == 3 else f"key-{n % 11}".encode(),
                    value=None if n % 13 == 5 else f"value {n} ".encode() * (1 + n % 9),
                    headers=[("trace", str(n).encode())] if n % 3 == 0 else None,
                    timestamp=T0_MS + n * 10,
                )
            sent += 2 + 3 * round_
            assert producer.flush(30) == 0
    return sent


def closed_segments(partition_dir: Path) -> list[Path]:
    logs = sorted(partition_dir.glob("*.log"))
    assert len(logs) >= 3, f"expected the small segments to roll: {logs}"
    return logs[:-1]


def parsed(lines: list[str]) -> dict[str, list[tuple]]:
    """Batch, record and index lines of either tool, in a shape both print."""
    out: dict[str, list[tuple]] = {"batches": [], "records": [], "index": [], "time": []}
    for line in lines:
        if m := BATCH.match(line):
            crc = int(m.group(10), 16) if m.group(10).startswith("0x") else int(m.group(10))
            numbers = tuple(int(m.group(g)) for g in (1, 2, 3, 4, 6, 7, 8))
            out["batches"].append((*numbers, m.group(5), m.group(9), crc))
        elif m := RECORD.match(line):
            key_size, value_size = int(m.group(4)), int(m.group(5))
            rest = m.group(7)
            key = re.search(r" key: (.*?)(?: payload: |$)", rest)
            payload = re.search(r" payload: (.*)$", rest)
            out["records"].append(
                (
                    int(m.group(1)),
                    m.group(2),
                    int(m.group(3)),
                    key_size,
                    value_size,
                    m.group(6),
                    key.group(1) if key_size >= 0 and key else None,
                    payload.group(1) if value_size >= 0 and payload else None,
                )
            )
        elif m := INDEX.match(line):
            out["index"].append((int(m.group(1)), int(m.group(2))))
        elif m := TIME_INDEX.match(line):
            out["time"].append((int(m.group(1)), int(m.group(2))))
    return out


def kafka_dump(files: list[Path], *options: str) -> java_tools.ToolResult:
    args = ["--files", ",".join(str(f) for f in files), *options]
    return java_tools.run_tool(java_tools.DUMP_LOG_SEGMENTS, args)


def tidelog_dump(files: list[Path], capsys: pytest.CaptureFixture[str], *options: str) -> str:
    capsys.readouterr()
    assert tidelog_main(["dump-log", *options, *map(str, files)]) == 0
    return capsys.readouterr().out


def test_kafka_dump_log_reads_tidelog_files(
    tidelog: Target, unique: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("dumplog")
    sent = produce(tidelog.bootstrap, topic)
    logs = closed_segments(tidelog.data_dir / f"{topic}-0")

    theirs = kafka_dump(logs, "--deep-iteration", "--print-data-log")
    assert "invalid bytes" not in theirs.stdout and "isvalid: false" not in theirs.stdout
    ours_out = tidelog_dump(logs, capsys, "--print-data-log")
    ours, kafka = parsed(ours_out.splitlines()), parsed(theirs.stdout.splitlines())
    assert kafka["batches"] and len(kafka["records"]) >= sent // 2
    assert {b[6] for b in kafka["batches"]} == {2}  # stored as Kafka v2 batches
    assert {b[8] for b in kafka["batches"]} >= {"none", "lz4", "zstd", "gzip"}
    assert ours["batches"] == kafka["batches"]
    assert ours["records"] == kafka["records"]
    offsets = [r[0] for r in kafka["records"]]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))

    indexes = [log.with_suffix(".index") for log in logs]
    time_indexes = [log.with_suffix(".timeindex") for log in logs]
    verified = kafka_dump([*indexes, *time_indexes], "--verify-index-only")
    assert "Mismatches" not in verified.stderr, verified.stderr
    assert "mismatch" not in verified.stderr and "not found" not in verified.stderr
    assert "out of order" not in verified.stderr, verified.stderr

    their_index = parsed(kafka_dump(indexes).stdout.splitlines())["index"]
    their_time = parsed(kafka_dump(time_indexes).stdout.splitlines())["time"]
    assert their_index and their_time
    assert parsed(tidelog_dump(indexes, capsys).splitlines())["index"] == their_index
    assert parsed(tidelog_dump(time_indexes, capsys).splitlines())["time"] == their_time
