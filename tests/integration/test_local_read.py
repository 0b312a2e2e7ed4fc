"""Local reads (docs/protocol.md §9): a client on the broker's host reads the batches of
a large fetch answer from the segment file itself, and falls back to the wire."""

from __future__ import annotations

import os
import re
import shutil
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

from protocol import calls
from protocol.batch import encode_batch, iter_headers
from spark_connector.local_read import MAX_LOCAL_FAILURES, LocalFiles, local_reads_wanted
from spark_connector.options import parse_source_options
from spark_connector.planning import OffsetRange
from spark_connector.reading import ReadStats, read_ranges
from tests.conftest import BrokerProcess
from tidelog.client import Client

pytestmark = pytest.mark.integration

TOPIC = "local"
SEGMENT_BYTES = 400_000
PARTITIONS = 2
RECORDS_PER_PARTITION = 12_000  # ~1.3 MB a partition: several segments
BIG_FETCH_BYTES = 1 << 20  # answered from the file (spans start at 64 KiB)
SMALL_FETCH_BYTES = 16 * 1024  # copied into the answer


@pytest.fixture
def loaded(broker_factory) -> BrokerProcess:
    broker = broker_factory(f"log.segment.bytes={SEGMENT_BYTES}")
    with Client(broker.bootstrap) as client:
        client.create_topic(TOPIC, PARTITIONS)
        for partition in range(PARTITIONS):
            for first in range(0, RECORDS_PER_PARTITION, 500):
                records = [(None, os.urandom(100), None, 1_000 + first + n) for n in range(500)]
                client.produce(TOPIC, partition, encode_batch(records))
    return broker


def _fetch(client: Client, offset: int, max_bytes: int, *, local: bool) -> calls.FetchResult:
    return client.call(calls.fetch(TOPIC, 0, offset, max_bytes=max_bytes, local_read=local))


def _file_bytes(local: dict) -> bytes:
    with open(local["path"], "rb") as f:
        assert os.fstat(f.fileno()).st_ino == local["inode"]
        return os.pread(f.fileno(), local["length"], local["position"])


def test_a_large_answer_says_where_the_same_batches_lie(loaded: BrokerProcess) -> None:
    bases = sorted(int(f.stem) for f in (loaded.data_dir / f"{TOPIC}-0").glob("*.log"))
    assert len(bases) >= 3
    with Client(loaded.bootstrap) as client:
        for offset in (bases[0], bases[1] + 17, bases[2] + 1):  # several batches left
            wired = _fetch(client, offset, BIG_FETCH_BYTES, local=False)
            local = _fetch(client, offset, BIG_FETCH_BYTES, local=True)
            assert wired.local is None and len(wired.records) >= 64 * 1024
            assert local.records == b"" and local.local is not None
            assert Path(local.local["path"]).is_absolute()
            assert _file_bytes(local.local) == wired.records
            counted = sum(h.record_count for _, h in iter_headers(wired.records))
            assert local.local["record_count"] == counted
            assert local[1:3] == wired[1:3]  # high watermark, log start offset


def test_small_answers_and_clients_that_do_not_ask_get_bytes(loaded: BrokerProcess) -> None:
    with Client(loaded.bootstrap) as client:
        small = _fetch(client, 0, SMALL_FETCH_BYTES, local=True)
        assert small.local is None and 0 < len(small.records) < 64 * 1024  # one batch
        assert _fetch(client, 0, BIG_FETCH_BYTES, local=False).local is None


def test_local_answers_count_in_the_fetch_metrics(loaded: BrokerProcess) -> None:
    def bytes_out() -> float:
        port = loaded.metrics_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        match = re.search(rf'^tidelog_bytes_out_total\{{topic="{TOPIC}"\}} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    with Client(loaded.bootstrap) as client:
        before = bytes_out()
        local = _fetch(client, 0, BIG_FETCH_BYTES, local=True)
        assert local.local is not None
        assert bytes_out() - before == local.local["length"]


def _read_all(broker: BrokerProcess, local_reads: str) -> tuple[pa.Table, ReadStats]:
    opts = parse_source_options(
        {"bootstrap.servers": broker.bootstrap, "subscribe": TOPIC, "localReads": local_reads},
        streaming=False,
    )
    stats = ReadStats()
    ranges = tuple(
        OffsetRange(TOPIC, p, 0, RECORDS_PER_PARTITION, False, False) for p in range(PARTITIONS)
    )
    return pa.Table.from_batches(list(read_ranges(opts, ranges, stats=stats))), stats


def test_a_task_reads_the_same_rows_from_the_files(loaded: BrokerProcess) -> None:
    local, local_stats = _read_all(loaded, "true")
    wired, wired_stats = _read_all(loaded, "false")
    assert local.num_rows == PARTITIONS * RECORDS_PER_PARTITION
    assert local.equals(wired)
    assert local_stats.local_reads > 0 and local_stats.local_fallbacks == 0
    assert wired_stats.local_reads == 0
    assert local_stats.fetched_bytes == wired_stats.fetched_bytes


def test_a_replaced_segment_file_is_fetched_over_the_wire(loaded: BrokerProcess) -> None:
    # As when the cleaner swaps a segment: same path, another file. The broker keeps
    # serving its open file; the task sees the inode differ and fetches over the wire.
    wired, _ = _read_all(loaded, "false")
    first = sorted((loaded.data_dir / f"{TOPIC}-0").glob("*.log"))[0]
    copy = first.with_suffix(".copy")
    shutil.copyfile(first, copy)
    os.replace(copy, first)
    local, stats = _read_all(loaded, "true")
    assert local.equals(wired)
    assert stats.local_fallbacks >= 1 and stats.local_reads > 0


def test_unusable_descriptors_return_nothing_and_turn_local_reads_off(
    loaded: BrokerProcess,
) -> None:
    with Client(loaded.bootstrap) as client:
        good = _fetch(client, 0, BIG_FETCH_BYTES, local=True).local
    assert good is not None
    files = LocalFiles()
    try:
        view = files.read(good, 0)
        assert view is not None and bytes(view) == _file_bytes(good)
        stale = [
            {**good, "inode": good["inode"] + 1},  # not the broker's file
            {**good, "path": good["path"] + ".gone"},  # renamed away (retention)
            {**good, "position": os.path.getsize(good["path"])},  # past the end
        ]
        for bad in stale:
            assert files.read(bad, 0) is None
        assert files.failures == MAX_LOCAL_FAILURES and not files.enabled
        assert files.read(good, 10**9) is None  # the batches do not hold that offset
    finally:
        files.close()


@pytest.mark.parametrize(
    ("setting", "servers", "wanted"),
    [
        ("auto", "127.0.0.1:9092", True),
        ("auto", "localhost:9092", True),
        ("auto", "[::1]:9092", True),
        ("auto", "10.1.2.3:9092", False),
        ("auto", "broker.example.com:9092", False),
        ("true", "10.1.2.3:9092", True),
        ("false", "127.0.0.1:9092", False),
    ],
)
def test_auto_asks_only_a_broker_on_a_loopback_address(
    setting: str, servers: str, wanted: bool
) -> None:
    assert local_reads_wanted(setting, servers) is wanted
