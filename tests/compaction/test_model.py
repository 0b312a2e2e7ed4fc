"""Model-based test of the cleaner over real storage logs.

Random keyed appends, tombstones, rolls, clock moves, cleanings (some with a tiny
offset map, so they stop part way), clean restarts, and crashes in the middle of a
cleaning. A crash is simulated exactly: an I/O layer copies the data directory just
before its k-th file operation during the cleaning (the state a SIGKILL there would
leave: every completed write is in the page cache), and the broker then restarts
from that copy without a clean shutdown.

After every step, against a model of everything ever appended:
- each record in the log is the record the model has at that offset (offsets and
  contents never change), and offsets increase;
- the log start and end offsets are unchanged;
- for every key, its latest record is present, except a latest tombstone, which
  may be gone once `delete.retention.ms` has passed since it was appended, and
  then no older record of the key may be visible;
- no `.cleaned` or `.swap` file is left after a restart;
- every batch keeps the layout it was produced in: Kafka v2 batches (a Kafka
  producer's, stored as sent) stay Kafka batches through every cleaning, and a log
  may mix both (the machine's `kafka` choice: never, always, or per append).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from storage.fileio import FileIO
from tests.compaction.helpers import (
    Clock,
    append,
    batches_of,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_all,
)

RETENTION_MS = 500
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "600",
    "delete.retention.ms": str(RETENTION_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "index.interval.bytes": "100",
}
KEYS = [b"a", b"b", b"c", b"d", b"e"]


class SnapshotIO(FileIO):
    """Copies the data directory before its `snapshot_at`-th renaming, writing or
    unlinking call: a fake of the OS that captures a crash state."""

    def __init__(self) -> None:
        self.data_dir: Path | None = None
        self.snapshot_dir: Path | None = None
        self.snapshot_at = 0
        self.ops = 0
        self.taken = False

    def _op(self) -> None:
        if self.snapshot_at <= 0 or self.taken:
            return
        self.ops += 1
        if self.ops == self.snapshot_at:
            assert self.data_dir is not None and self.snapshot_dir is not None
            shutil.copytree(self.data_dir, self.snapshot_dir)
            self.taken = True

    def pwrite(self, fd, data, position):
        self._op()
        return super().pwrite(fd, data, position)

    def rename(self, source, target):
        self._op()
        super().rename(source, target)

    def unlink(self, path):
        self._op()
        super().unlink(path)

    def fsync_dir(self, path):
        self._op()
        super().fsync_dir(path)


def crash_mid_cleaning(machine: Any, step: int) -> None:
    """One cleaning of `machine`'s log with the data directory captured before the
    cleaning's `step`-th file operation, then a restart from that copy (a kill -9 at
    that point); nothing more when the cleaning ended before that step."""
    machine.log.roll()  # something closed to clean, most of the time
    io = machine.io
    io.snapshot_dir = machine.root / "crash"
    io.snapshot_at, io.ops, io.taken = step, 0, False
    try:
        machine.cleaners.clean_one(make_cleaner(map_bytes=1 << 16))
    finally:
        io.snapshot_at = 0
    if not io.taken:
        event("cleaning ended before the crash point")
        return
    event("crashed during a cleaning")
    machine.logs.close()
    shutil.rmtree(machine.data_dir)
    io.snapshot_dir.rename(machine.data_dir)
    machine._reopen(clean=False)


class CleanerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="tidelog-model-"))
        self.data_dir = self.root / "data"
        self.clock = Clock()
        self.io = SnapshotIO()
        self.io.data_dir = self.data_dir
        self.logs = open_manager(self.data_dir, self.clock, self.io)
        self.logs.create_topic("t", 1, TOPIC_CONFIG)
        self.cleaners = make_cleaner_manager(self.logs, self.clock, self.io)
        # offset -> (key, value, append time, produced as a Kafka batch)
        self.model: list[tuple[bytes, bytes | None, int, bool]] = []
        self.layouts = "tidelog"

    @initialize(layouts=st.sampled_from(["tidelog", "kafka", "mixed"]))
    def choose_layouts(self, layouts):
        self.layouts = layouts
        event(f"layouts: {layouts}")

    def teardown(self) -> None:
        try:
            self.logs.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log(self):
        return self.logs.get_log("t", 0)

    @rule(
        rows=st.lists(
            st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=40))),
            min_size=1,
            max_size=4,
        ),
        kafka=st.booleans(),
    )
    def produce(self, rows, kafka):
        kafka = self.layouts == "kafka" or (self.layouts == "mixed" and kafka)
        base = append(self.log, rows, self.clock(), kafka=kafka)
        assert base == len(self.model)
        self.model += [(k, v, self.clock(), kafka) for k, v in rows]

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.sampled_from([1, 100, RETENTION_MS, 5 * RETENTION_MS]))
    def advance_clock(self, ms):
        self.clock.advance(ms)

    @rule(tiny_map=st.booleans())
    def clean(self, tiny_map):
        cleaner = make_cleaner(map_bytes=24 * 7 if tiny_map else 1 << 16)
        self.cleaners.clean_one(cleaner)

    def _reopen(self, *, clean: bool) -> None:
        if clean:
            self.logs.close()
        self.logs = open_manager(self.data_dir, self.clock, self.io)
        self.cleaners = make_cleaner_manager(self.logs, self.clock, self.io)
        leftovers = [
            p.name
            for p in (self.data_dir / "t-0").iterdir()
            if p.name.endswith((".cleaned", ".swap"))
        ]
        assert leftovers == []

    @rule()
    def clean_restart(self):
        self._reopen(clean=True)

    @rule(step=st.integers(min_value=1, max_value=30))
    def crash_during_cleaning(self, step):
        crash_mid_cleaning(self, step)

    @invariant()
    def log_matches_model(self):
        log = self.log
        assert log.log_start_offset == 0
        assert log.log_end_offset == len(self.model)
        records = read_all(log)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        present = {}
        for r in records:
            key, value, _, _ = self.model[r.offset]
            assert (r.key, r.value) == (key, value)
            present[r.offset] = r
        latest: dict[bytes, int] = {}
        for offset, (key, _, _, _) in enumerate(self.model):
            latest[key] = offset
        now = self.clock()
        for key, offset in latest.items():
            _, value, appended_ms, _ = self.model[offset]
            if offset in present:
                continue
            assert value is None, f"latest value of {key!r} at {offset} is gone"
            assert now >= appended_ms + RETENTION_MS, f"tombstone of {key!r} dropped early"
            assert all(r.key != key for r in records), f"{key!r} resurrected"

    @invariant()
    def batches_keep_their_layout(self):
        log = self.log
        offset = log.log_start_offset
        while offset < log.high_watermark:
            data = log.read(offset, 1 << 20).records
            if not data:
                break
            for header, _ in batches_of(data):
                kafka = self.model[header.base_offset][3]
                assert header.magic == (2 if kafka else 1), header
                offset = max(offset, header.next_offset)


CleanerModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestCleanerModel = CleanerModel.TestCase
