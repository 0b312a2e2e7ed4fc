"""Model-based test of the cleaner on a transactional compacted topic (issue 36).

Two transactional producers and a plain one append keyed records, the transactional
ones commit, abort, or are bumped to a new epoch with their open transaction aborted
(as InitProducerId does to a zombie); rolls, clock moves, cleanings (some with a tiny
offset map), clean restarts and crashes in the middle of a cleaning (the snapshot I/O
of tests/compaction/test_model.py) interleave.

After every step, against a model of every record and every transaction's outcome:
- a read_committed reader (Kafka's consumer algorithm over the aborted lists the log
  answers) sees only records the model has committed or written outside transactions,
  at their offsets, and below the model's LSO;
- for every key, its latest such record is present, except a latest tombstone, which
  may go once `delete.retention.ms` has passed since it was appended (and then no
  older record of the key may be seen);
- the LSO is the model's;
- an append at a producer's older epoch is refused, however markers were cleaned and
  the state rebuilt (Kafka keeps the marker that alone records an epoch bump).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.errors import TidelogError
from tests.compaction.helpers import (
    Clock,
    batches_of,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_committed,
)
from tests.compaction.test_cleaner_txn import txn
from tests.compaction.test_model import SnapshotIO, crash_mid_cleaning

RETENTION_MS = 500
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "400",
    "delete.retention.ms": str(RETENTION_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "index.interval.bytes": "100",
}
KEYS = [b"a", b"b", b"c", b"d"]
TXN_PRODUCERS = [5, 6]
PLAIN = 9  # an idempotent, non-transactional producer


@dataclass
class Producer:
    epoch: int = 0
    sequence: int = 0
    open: list[int] = field(default_factory=list)  # offsets of its open transaction


@dataclass
class Row:
    key: bytes
    value: bytes | None
    appended_ms: int
    state: str  # "committed", "aborted" or "open"
    producer: int


class TxnCleanerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="tidelog-txn-model-"))
        self.data_dir = self.root / "data"
        self.clock = Clock()
        self.io = SnapshotIO()
        self.io.data_dir = self.data_dir
        self.logs = open_manager(self.data_dir, self.clock, self.io)
        self.logs.create_topic("t", 1, TOPIC_CONFIG)
        self.cleaners = make_cleaner_manager(self.logs, self.clock, self.io)
        self.rows: dict[int, Row] = {}  # data offsets only (markers are not rows)
        self.producers = {pid: Producer() for pid in [*TXN_PRODUCERS, PLAIN]}

    def teardown(self) -> None:
        try:
            self.logs.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log(self):
        return self.logs.get_log("t", 0)

    def _append(self, pid: int, rows, *, transactional: bool) -> None:
        p = self.producers[pid]
        now = self.clock()
        base = txn(log=self.log, rows=rows, ts=now, producer_id=pid, sequence=p.sequence,
                   transactional=transactional, epoch=p.epoch)  # fmt: skip
        p.sequence += len(rows)
        state = "open" if transactional else "committed"
        for i, (k, v) in enumerate(rows):
            self.rows[base + i] = Row(k, v, now, state, pid)
            if transactional:
                p.open.append(base + i)

    @rule(
        pid=st.sampled_from([*TXN_PRODUCERS, PLAIN]),
        rows=st.lists(
            st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=30))),
            min_size=1,
            max_size=3,
        ),
    )
    def produce(self, pid, rows):
        self._append(pid, rows, transactional=pid != PLAIN)

    def _end(self, pid: int, *, commit: bool, epoch: int) -> None:
        p = self.producers[pid]
        self.log.append_txn_marker(
            pid, epoch, commit=commit, coordinator_epoch=0, append_time_ms=self.clock()
        )
        for offset in p.open:
            self.rows[offset].state = "committed" if commit else "aborted"
        p.open = []
        if epoch != p.epoch:
            p.epoch, p.sequence = epoch, 0

    @rule(pid=st.sampled_from(TXN_PRODUCERS), commit=st.booleans())
    def end_transaction(self, pid, commit):
        self._end(pid, commit=commit, epoch=self.producers[pid].epoch)

    @rule(pid=st.sampled_from(TXN_PRODUCERS))
    def bump_epoch(self, pid):
        """InitProducerId of a new instance: the open transaction (if any) is aborted at
        the bumped epoch, and the new instance starts its sequences at 0."""
        event("epoch bumped with an open transaction" if self.producers[pid].open else "bump")
        self._end(pid, commit=False, epoch=self.producers[pid].epoch + 1)

    @rule(commits=st.lists(st.booleans(), min_size=2, max_size=2))
    def settle(self, commits):
        """Every open transaction ended, then cleanings across a delete horizon: the
        passes that remove data, set the markers' horizons and drop the markers."""
        for pid, commit in zip(TXN_PRODUCERS, commits, strict=True):
            if self.producers[pid].open:
                self._end(pid, commit=commit, epoch=self.producers[pid].epoch)
        for key in KEYS[:3]:  # each pass finds a dirty section (the cleaner's trigger)
            self._append(PLAIN, [(key, b"settle")], transactional=False)
            self.log.roll()
            self.clean(tiny_map=False)
            self.clock.advance(RETENTION_MS)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(ms=st.sampled_from([1, 100, RETENTION_MS, 5 * RETENTION_MS]))
    def advance_clock(self, ms):
        self.clock.advance(ms)

    @rule(tiny_map=st.booleans())
    def clean(self, tiny_map):
        result = self.cleaners.clean_one(make_cleaner(map_bytes=24 * 7 if tiny_map else 1 << 16))
        event("cleaned" if result is not None and result.records_removed else "nothing cleaned")

    def _reopen(self, *, clean: bool) -> None:
        if clean:
            self.logs.close()
        self.logs = open_manager(self.data_dir, self.clock, self.io)
        self.cleaners = make_cleaner_manager(self.logs, self.clock, self.io)

    @rule()
    def clean_restart(self):
        self._reopen(clean=True)

    @rule()
    def restart_without_snapshots(self):
        """The producer state rebuilt from the log alone (Kafka's case for keeping each
        live producer's last record): only the log can still fence a zombie."""
        self.logs.close()
        for snapshot in (self.data_dir / "t-0").glob("*.snapshot"):
            snapshot.unlink()
        self._reopen(clean=False)

    @rule(step=st.integers(min_value=1, max_value=30))
    def crash_during_cleaning(self, step):
        crash_mid_cleaning(self, step)

    @precondition(lambda self: any(self.producers[p].epoch > 0 for p in TXN_PRODUCERS))
    @rule(pid=st.sampled_from(TXN_PRODUCERS))
    def zombie_is_fenced(self, pid):
        p = self.producers[pid]
        if p.epoch == 0:
            return
        with pytest.raises(TidelogError):
            txn(self.log, [(b"z", b"zombie")], self.clock(), pid, 0, epoch=p.epoch - 1)

    def _model_lso(self) -> int:
        opens = [min(p.open) for p in self.producers.values() if p.open]
        return min(opens) if opens else self.log.log_end_offset

    def _committed_view(self) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) as a read_committed Kafka consumer sees them."""
        log = self.log
        aborted_entries: list[tuple[int, int]] = []
        headers = []
        offset = log.log_start_offset
        while True:
            data = log.read(offset, 1 << 20, committed=True)
            if not data.records:
                break
            aborted_entries += list(data.aborted_transactions)
            batches = batches_of(data.records)
            headers += batches
            offset = max(h.next_offset for h, _ in batches)
        return [(r.offset, r.key, r.value) for r in read_committed(headers, aborted_entries)]

    @invariant()
    def read_committed_matches_the_model(self):
        lso = self._model_lso()
        assert self.log.last_stable_offset == lso
        seen = self._committed_view()
        offsets = [o for o, _, _ in seen]
        assert offsets == sorted(set(offsets))
        for offset, key, value in seen:
            assert offset < lso, f"offset {offset} at or past the LSO {lso}"
            row = self.rows[offset]
            assert row.state == "committed", f"{row.state} record at {offset} delivered"
            assert (key, value) == (row.key, row.value)
        seen_offsets = set(offsets)
        latest: dict[bytes, int] = {}
        for offset in sorted(self.rows):
            if offset < lso and self.rows[offset].state == "committed":
                latest[self.rows[offset].key] = offset
        now = self.clock()
        for key, offset in latest.items():
            if offset in seen_offsets:
                continue
            row = self.rows[offset]
            assert row.value is None, f"latest committed {key!r} at {offset} is gone"
            assert now >= row.appended_ms + RETENTION_MS, f"tombstone of {key!r} dropped early"
            assert all(k != key for _, k, _ in seen), f"{key!r} resurrected"


TxnCleanerModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestTxnCleanerModel = TxnCleanerModel.TestCase
