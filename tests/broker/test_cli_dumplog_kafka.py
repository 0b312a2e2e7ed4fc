"""`tidelog dump-log` on a segment holding both layouts: a Kafka v2 batch shows its
magic, leader epoch, attributes, CRC and varint records like a Tidelog batch does."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.cli.main import main
from protocol.compression import Compression
from protocol.kafka.convert import tidelog_to_kafka
from protocol.kafka.records import read_batch_header
from tests.broker.test_cli import two_records, write_segment


def test_a_mixed_segment_dumps_both_layouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = tidelog_to_kafka(two_records(Compression.LZ4), partition_leader_epoch=0)[0]
    path = write_segment(tmp_path, two_records(), kafka)
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset")]
    assert "magic: 1 attributes: 0x0000 compresscodec: none" in batches[0]
    crc = read_batch_header(kafka).crc
    assert batches[1].startswith(
        f"baseOffset: 102 lastOffset: 103 count: 2 position: {len(two_records())}"
    )
    assert (
        f"magic: 2 partitionLeaderEpoch: 0 attributes: 0x0003 compresscodec: lz4 crc: {crc:#010x}"
    ) in batches[1]
    assert batches[1].endswith("producerEpoch: -1 baseSequence: -1 isValid: true")
    records = [line for line in lines if line.startswith("| offset")]
    assert records[2:] == [
        "| offset: 102 CreateTime: 1000 keySize: 1 valueSize: 5 headerKeys: [h] key: k "
        "payload: hello",
        "| offset: 103 CreateTime: 2000 keySize: -1 valueSize: -1 headerKeys: [] key: null "
        "payload: null",
    ]


def test_a_damaged_kafka_batch_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = bytearray(tidelog_to_kafka(two_records(), partition_leader_epoch=0)[0])
    kafka[70] ^= 0xFF
    path = write_segment(tmp_path, bytes(kafka), two_records())
    assert main(["dump-log", str(path)]) == 1
    batches = [line for line in capsys.readouterr().out.splitlines() if "baseOffset" in line]
    assert "isValid: false reason:" in batches[0] and "CRC" in batches[0]
    assert "isValid: true" in batches[1]


def test_a_torn_kafka_batch_is_truncated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = tidelog_to_kafka(two_records(), partition_leader_epoch=0)[0]
    path = write_segment(tmp_path, two_records(), kafka)
    path.write_bytes(path.read_bytes()[:-3])
    assert main(["dump-log", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"needs {len(kafka)} bytes, {len(kafka) - 3} left (truncated)" in out
