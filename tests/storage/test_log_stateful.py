"""Model-based test: the real Log against a list of batches in memory (RELIABILITY CC-13).

Rules: appends (of Tidelog batches, as a msgpack produce, or Kafka v2 batches, as a
Kafka Produce: one log holds both, issue 35), reads, timestamp lookups, rolls (small
segment.bytes and segment.index.bytes), delete_records, retention-style segment
deletion, clean restarts and crash restarts that cut the active segment at a random
byte past the last fsync (what a process crash can leave behind).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from protocol.batch import (
    ANY_LAYOUT,
    KAFKA_LAYOUT,
    LAYOUT,
    MAGIC,
    BatchHeader,
    BatchWalk,
    iter_records,
)
from protocol.errors import MessageTooLarge
from protocol.kafka.convert import tidelog_to_kafka
from protocol.layouts import to_layout
from storage.config import LogConfig
from storage.files import log_path
from tests.storage.helpers import BASE_TS, ManualClock, batch, open_test_log


@dataclass
class ModelBatch:
    base: int
    timestamps: list[int]
    values: list[bytes]

    @property
    def last(self) -> int:
        return self.base + len(self.timestamps) - 1


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="tidelog-model-"))
        self.clock = ManualClock()
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.end = 0
        self.sequence = 0

    @initialize(
        segment_bytes=st.sampled_from([300, 700, 2000]),
        index_bytes=st.sampled_from([16, 40, 4096]),
        interval=st.sampled_from([0, 50, 4096]),
    )
    def open(self, segment_bytes: int, index_bytes: int, interval: int) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            segment_index_bytes=index_bytes,
            index_interval_bytes=interval,
        )
        self.log = open_test_log(self.directory, self.config, clock=self.clock)

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    # ---- model helpers ---------------------------------------------------

    def records(self) -> list[tuple[int, int, bytes]]:
        return [
            (b.base + i, ts, value)
            for b in self.batches
            for i, (ts, value) in enumerate(zip(b.timestamps, b.values, strict=True))
            if b.base + i >= self.start
        ]

    def checkpoint_start(self) -> int | None:
        first_base = self.log.segments_info()[0].base_offset
        return self.log.log_start_offset if self.log.log_start_offset > first_base else None

    # ---- rules -----------------------------------------------------------

    @rule(
        shapes=st.lists(
            st.lists(st.integers(0, 100), min_size=1, max_size=4), min_size=1, max_size=3
        ),
        kafka=st.booleans(),
    )
    def append(self, shapes: list[list[int]], kafka: bool) -> None:
        payload = b""
        new = []
        base = self.end
        for stamps in shapes:
            timestamps = [BASE_TS + t for t in stamps]
            self.sequence += 1
            one = batch(len(stamps), timestamps=timestamps, tag=self.sequence)
            if kafka:  # the same records as a Kafka producer sends them
                one = tidelog_to_kafka(one, partition_leader_epoch=-1)[0]
            payload += one
            # The values helpers.batch() writes for this tag:
            values = [f"{self.sequence}:{i}:".encode().ljust(10, b".") for i in range(len(stamps))]
            new.append(ModelBatch(base, timestamps, values))
            base += len(stamps)
        layout = KAFKA_LAYOUT if kafka else LAYOUT
        if len(payload) > self.config.segment_bytes:
            with pytest.raises(MessageTooLarge):
                self.log.append(payload, layout=layout)
            return
        info = self.log.append(payload, layout=layout)
        assert info.base_offset == self.end and info.last_offset == base - 1
        self.batches += new
        self.end = base

    @rule(data=st.data(), max_bytes=st.integers(0, 400))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        got = self.log.read(offset, max_bytes)
        assert (got.log_start_offset, got.high_watermark) == (self.start, self.end)
        if offset == self.end:
            assert got.records == b""
            return
        headers = [h for _, h in _headers(got.records)]
        assert headers, "at least one batch when one is available"
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        assert len(headers) == 1 or len(got.records) <= max_bytes
        by_base = {b.base: b for b in self.batches}
        for h in headers:
            assert h.base_offset in by_base
        expected = {o: (ts, v) for b in self.batches for o, ts, v in _rows(b)}
        for record in iter_records(to_layout(got.records, MAGIC)):
            assert (record.timestamp, record.value) == expected[record.offset]

    @rule(wanted=st.integers(-5, 110))
    def offset_for_time(self, wanted: int) -> None:
        expected = next(((o, ts) for o, ts, _ in self.records() if ts >= BASE_TS + wanted), None)
        assert self.log.offset_for_timestamp(BASE_TS + wanted) == expected

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end))
        assert self.log.delete_records(offset) == offset
        self.start = offset

    @precondition(lambda self: self.log.segment_count > 1)
    @rule(count=st.integers(1, 3))
    def delete_segments(self, count: int) -> None:
        self.log.delete_oldest_segments(count, "model")
        first = self.log.segments_info()[0].base_offset
        assert first <= self.end
        self.start = max(self.start, first)
        assert self.log.log_start_offset == self.start

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.end

    @rule()
    def clean_restart(self) -> None:
        start = self.checkpoint_start()
        self.log.close()
        self.log = open_test_log(
            self.directory, self.config, clock=self.clock, log_start_offset=start
        )
        assert self.log.recovery_point == self.end

    @rule(data=st.data(), garbage=st.binary(max_size=80))
    def crash_restart(self, data: st.DataObject, garbage: bytes) -> None:
        recovery_point = self.log.recovery_point
        start = self.checkpoint_start()
        active = self.log.active_segment
        path = log_path(self.directory, active.base_offset)
        content = path.read_bytes()[: active.size]
        positions = _headers(content)
        flushed = next((p for p, h in positions if h.base_offset >= recovery_point), len(content))
        cut = data.draw(st.integers(flushed, len(content)))
        del self.log  # a crash: no close, no flush
        with open(path, "r+b") as f:
            f.truncate(cut)
            f.seek(cut)
            f.write(garbage)
        survivors = {h.base_offset for p, h in positions if p + h.size <= cut}
        self.batches = [
            b for b in self.batches if b.base < active.base_offset or b.base in survivors
        ]
        self.end = self.batches[-1].last + 1 if self.batches else active.base_offset
        self.end = max(self.end, active.base_offset)
        if start is not None and start > self.end:
            self.batches, self.end = [], start
        self.log = open_test_log(
            self.directory,
            self.config,
            clock=self.clock,
            clean=False,
            recovery_point=recovery_point,
            log_start_offset=start,
        )

    # ---- invariants ------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.log.high_watermark == self.end
        assert self.log.recovery_point <= self.end
        infos = self.log.segments_info()
        assert all(a.next_offset <= b.base_offset for a, b in itertools.pairwise(infos))

    @rule()
    def everything_readable(self) -> None:
        offset, seen = self.start, []
        while offset < self.end:
            data = to_layout(self.log.read(offset, 1000).records, MAGIC)
            records = [r for r in iter_records(data)]
            records = [r for r in records if r.offset >= offset]
            assert records
            seen += [(r.offset, r.timestamp, r.value) for r in records]
            offset = records[-1].offset + 1
        assert seen == self.records()


def _headers(data: bytes) -> list[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of either layout."""
    walk = BatchWalk(data, layout=ANY_LAYOUT)
    found = [(pos, BatchHeader(*fields)) for pos, fields in walk]
    assert walk.problem is None, walk.problem
    return found


def _rows(b: ModelBatch):
    for i, (ts, value) in enumerate(zip(b.timestamps, b.values, strict=True)):
        yield b.base + i, ts, value


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(max_examples=30, stateful_step_count=30, deadline=None)
