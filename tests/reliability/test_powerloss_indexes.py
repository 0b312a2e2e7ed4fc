"""A power cut that loses index pages (docs/storage.md "Flush and the recovery point").

An `acks: -1` round fsyncs the active segment's `.log` only; its indexes are fsynced
when it rolls, by the flush that moves the recovery point past it. After a cut the
active indexes hold whatever the kernel had written back. `PageLossIO` models that:
each `.log` keeps its fsynced length (garbage after it), each index file goes back to
its content at its last fsync (nothing when never fsynced) at either its length then
or its length now, unless the kernel wrote it back first (each file on its own), and
names whose directory entry was never fsynced vanish.
Every flushed record must be readable, and offset and time lookups must agree with
the records, whatever the cut left of the indexes.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import iter_records
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from storage.log import Log
from storage.segment_walk import iter_batches
from tests.storage.helpers import BASE_TS, batch, open_test_log, read_all

# Small segments and indexes: rolls by size and by a full index both happen.
CONFIG = LogConfig(segment_bytes=900, segment_index_bytes=64, index_interval_bytes=40)
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)


class PageLossIO(FileIO):
    """Records what each fsync made durable: a `.log`'s length, an index's bytes."""

    def __init__(self) -> None:
        self.synced_length: dict[str, int] = {}
        self.synced_bytes: dict[str, bytes] = {}
        self.durable_names: dict[str, set[str]] = {}
        self.index_fsyncs = 0
        self._paths: dict[int, str] = {}

    def open(
        self, path: Path, *, create: bool = False, writable: bool = True, exclusive: bool = False
    ) -> int:
        fd = super().open(path, create=create, writable=writable, exclusive=exclusive)
        self._paths[fd] = str(path)
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        path = self._paths[fd]
        if path.endswith(INDEX_SUFFIXES):
            self.index_fsyncs += 1
            self.synced_bytes[path] = Path(path).read_bytes()
        else:
            self.synced_length[path] = os.fstat(fd).st_size

    def fsync_dir(self, path: Path) -> None:
        super().fsync_dir(path)
        self.durable_names[str(path)] = set(os.listdir(path))

    def cut_power(self, directory: Path, rng: random.Random) -> None:
        durable = self.durable_names.get(str(directory), set())
        for entry in os.listdir(directory):
            path = directory / entry
            if entry not in durable:
                path.unlink()
            elif entry.endswith(LOG_SUFFIX):
                synced = self.synced_length.get(str(path), 0)
                if path.stat().st_size > synced:  # a file fsynced whole gains nothing
                    with open(path, "r+b") as f:
                        f.truncate(synced)
                        f.seek(synced)
                        f.write(rng.randbytes(rng.randrange(0, 40)))  # torn sectors
            elif entry.endswith(INDEX_SUFFIXES) and rng.random() < 0.7:
                # (Else the kernel wrote this one back before the cut: kept as it is.)
                kept = self.synced_bytes.get(str(path), b"")
                length = rng.choice([len(kept), path.stat().st_size])
                path.write_bytes(kept[:length].ljust(length, b"\0"))


def records_with_timestamps(log: Log) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record, read from the start."""
    out: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        got = [r for r in iter_records(log.read(offset, 1 << 20).records) if r.offset >= offset]
        out += [(r.offset, r.timestamp) for r in got]
        offset = got[-1].offset + 1
    return out


def check_lookups(log: Log) -> None:
    """Reads from every offset and offset-for-time of every timestamp give what the
    records say, and every index entry is one a rebuild could have written."""
    records = records_with_timestamps(log)
    for offset, _ in records:
        first = next(iter_records(log.read(offset, 1).records))
        assert first.offset <= offset, (offset, first.offset)
    for target in sorted({ts for _, ts in records} | {BASE_TS - 1}):
        expected = next(((o, ts) for o, ts in records if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    for segment in log._local.segments:
        walked = list(iter_batches(segment, 0, segment.size))
        ends = {(b.last_offset, b.position) for b in walked}
        oi, ti = segment.offset_index, segment.time_index
        view = oi._view()[: oi.entries]
        for rel, pos in zip(view["rel"], view["pos"], strict=True):
            assert (segment.base_offset + int(rel), int(pos)) in ends
        view = ti._view()[: ti.entries]
        for ts, rel in zip(view["ts"], view["rel"], strict=True):
            last = segment.base_offset + int(rel)
            assert max(b.max_timestamp for b in walked if b.last_offset <= last) == int(ts)


def run_cut(directory: Path, plan: list[tuple[int, str]], seed: int) -> PageLossIO:
    io = PageLossIO()
    log = open_test_log(directory, CONFIG, io=io, clean=False)
    acked: list[tuple[int, bytes | None]] = []
    for i, (count, then) in enumerate(plan):
        log.append(batch(count, tag=i, ts=BASE_TS + 10 * i - 25 * (i % 4 == 3)))
        if then in ("flush", "flush+roll"):
            log.flush()
            acked = read_all(log)  # everything up to here is acks=-1 durable
        if then in ("roll", "flush+roll"):
            log.roll()
    recovery_point = log.recovery_point
    del log
    io.cut_power(directory, random.Random(seed))
    reopened = open_test_log(directory, CONFIG, clean=False, recovery_point=recovery_point)
    survived = read_all(reopened)
    assert survived[: len(acked)] == acked
    assert [o for o, _ in survived] == list(range(len(survived)))
    check_lookups(reopened)
    reopened.append(batch(2, ts=BASE_TS))
    check_lookups(reopened)
    return io


STEPS = st.sampled_from(["", "flush", "roll", "flush+roll"])


@settings(max_examples=60, deadline=None)
@given(
    plan=st.lists(st.tuples(st.integers(1, 4), STEPS), min_size=1, max_size=40),
    seed=st.integers(0, 2**32),
)
def test_flushed_records_survive_lost_index_pages(plan, seed) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-index-loss-") as name:
        run_cut(Path(name), plan, seed)


def test_an_acks_all_round_fsyncs_no_index(tmp_path: Path) -> None:
    """The index fsyncs come with rolls, not with rounds: 30 flushed appends into one
    segment fsync no index; the flush after a roll fsyncs the rolled segment's two."""
    io = PageLossIO()
    log = open_test_log(tmp_path, LogConfig(index_interval_bytes=1), io=io, clean=False)
    for i in range(30):
        log.append(batch(2, tag=i, ts=BASE_TS + i))
        log.flush()
    assert log.active_segment.offset_index.entries == 29  # one per batch after the first
    assert io.index_fsyncs == 0
    log.roll()
    assert log.recovery_point == 60 and io.index_fsyncs == 0
    log.flush()  # nothing new to make durable but the rolled segment's indexes
    assert io.index_fsyncs == 2 and log.recovery_point == log.log_end_offset == 60


def test_a_segment_rolled_at_the_recovery_point_is_rescanned(tmp_path: Path) -> None:
    """Flushed to its end, then rolled, then the power went before another flush: its
    index entries were never fsynced, so recovery must rebuild them although the
    recovery point says every byte of it is durable."""
    io = PageLossIO()
    config = LogConfig(index_interval_bytes=1)
    log = open_test_log(tmp_path, config, io=io, clean=False)
    for i in range(12):  # timestamps out of order: the maximum is in the first batch
        log.append(batch(3, tag=i, ts=BASE_TS + (1000 if i == 0 else i)))
        log.flush()
    log.roll()
    log.append(batch(1, tag=99, ts=BASE_TS + 5))  # acks=1: not flushed
    recovery_point = log.recovery_point
    assert recovery_point == 36 and io.index_fsyncs == 0
    offset_index = tmp_path / f"{0:020d}{INDEX_SUFFIX}"
    written_back = offset_index.read_bytes()
    del log
    # The kernel committed the directory (the new segment's names survive) and wrote
    # the offset index back, not the time index: both indexes look sound.
    io.durable_names[str(tmp_path)] = set(os.listdir(tmp_path))
    io.cut_power(tmp_path, random.Random(3))
    offset_index.write_bytes(written_back)
    (tmp_path / f"{0:020d}{TIME_INDEX_SUFFIX}").write_bytes(b"")
    reopened = open_test_log(tmp_path, config, clean=False, recovery_point=recovery_point)
    assert [o for o, _ in read_all(reopened)][:36] == list(range(36))
    assert reopened.max_timestamp() == (0, BASE_TS + 1000)
    check_lookups(reopened)
