"""Producer state against a reference model (hypothesis stateful).

Random producers send batches with random epochs, retries of any of their
recent batches, gaps, several batches per request and failed writes; the
partition restarts from snapshots taken at random offsets, some of them torn,
and its log is sometimes truncated. The model keeps every producer's whole
history and decides each outcome from it directly; the test checks that
duplicates and errors come exactly when the model says, and that the state
rebuilt from snapshot + log equals the state before (or the model's after a
truncation).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.batch import encode_batch, iter_headers, set_base_offset
from protocol.errors import (
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    TidelogError,
    UnknownProducerId,
)
from storage.fileio import FileIO
from storage.producer_snapshot import list_snapshots, restore, write_snapshot
from storage.producer_state import (
    BATCHES_RETAINED,
    Accepted,
    BatchMetadata,
    Duplicate,
    ProducerEntry,
    ProducerState,
)

MOD = 2**31
PIDS = st.integers(1, 2)


@dataclass(frozen=True)
class Sent:
    pid: int
    epoch: int
    seq: int
    count: int


@dataclass(frozen=True)
class Logged:
    epoch: int
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    ts: int


class Model:
    """Every batch ever appended, per producer; decisions read straight off it."""

    def __init__(self) -> None:
        self.history: dict[int, list[Logged]] = {}

    def copy(self) -> Model:
        other = Model()
        other.history = {pid: list(batches) for pid, batches in self.history.items()}
        return other

    def decide(self, sent: Sent, committed: Model) -> str | Logged:
        """'ok', an error code, or the duplicated batch (judged on the committed history)."""
        last_seq = (sent.seq + sent.count - 1) % MOD
        done = committed.history.get(sent.pid, [])
        if done and done[-1].epoch == sent.epoch:
            recent = [b for b in done if b.epoch == sent.epoch][-BATCHES_RETAINED:]
            for b in recent:
                if (b.first_seq, b.last_seq) == (sent.seq, last_seq):
                    return b
        mine = self.history.get(sent.pid, [])
        if not mine:
            # Unknown producer: it must start at 0 (issue 21; Kafka 2.5+ accepts any).
            return "ok" if sent.seq == 0 else UnknownProducerId.code
        last = mine[-1]
        if sent.epoch < last.epoch:
            return InvalidProducerEpoch.code
        if sent.epoch > last.epoch:
            return "ok" if sent.seq == 0 else OutOfOrderSequenceNumber.code
        return "ok" if sent.seq == (last.last_seq + 1) % MOD else OutOfOrderSequenceNumber.code

    def add(self, sent: Sent, offset: int, ts: int) -> None:
        self.history.setdefault(sent.pid, []).append(
            Logged(
                sent.epoch,
                sent.seq,
                (sent.seq + sent.count - 1) % MOD,
                offset,
                offset + sent.count - 1,
                ts,
            )
        )

    def truncate_head(self, start: int) -> None:
        for pid in list(self.history):
            self.history[pid] = [b for b in self.history[pid] if b.last_offset >= start]
            if not self.history[pid]:
                del self.history[pid]

    def truncate(self, end: int) -> None:
        for pid in list(self.history):
            self.history[pid] = [b for b in self.history[pid] if b.last_offset < end]
            if not self.history[pid]:
                del self.history[pid]

    def entries(self) -> dict[int, ProducerEntry]:
        out = {}
        for pid, batches in self.history.items():
            epoch = batches[-1].epoch
            kept = [b for b in batches if b.epoch == epoch][-BATCHES_RETAINED:]
            out[pid] = ProducerEntry(
                epoch,
                tuple(
                    BatchMetadata(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.ts)
                    for b in kept
                ),
                batches[-1].ts,
            )
        return out


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="producer-state-"))
        self.io = FileIO()
        self.state = ProducerState("t-0")
        self.model = Model()
        self.log: list[bytes] = []  # one encoded batch per element, offsets assigned
        self.ends: list[int] = []  # log end offset after each logged batch
        self.log_start = 0
        self.ts = 1_000

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.ends[-1] if self.ends else 0

    # ---- what producers send ------------------------------------------------

    def _next(self, pid: int) -> Sent:
        done = self.model.history.get(pid)
        if not done:
            return Sent(pid, 0, 0, 1)
        return Sent(pid, done[-1].epoch, (done[-1].last_seq + 1) % MOD, 1)

    @st.composite
    @staticmethod
    def _sent(draw: st.DrawFn, machine: ProducerStateMachine) -> Sent:
        pid = draw(PIDS)
        nxt = machine._next(pid)
        count = draw(st.integers(1, 3))
        kind = draw(st.sampled_from(["next"] * 6 + ["retry"] * 2 + ["gap", "epoch", "wrap"]))
        done = machine.model.history.get(pid, [])
        if kind == "retry" and done:
            b = done[-draw(st.integers(1, min(len(done), BATCHES_RETAINED + 2)))]
            return Sent(pid, b.epoch, b.first_seq, (b.last_seq - b.first_seq) % MOD + 1)
        if kind == "gap":
            return Sent(pid, nxt.epoch, (nxt.seq + draw(st.integers(1, 3))) % MOD, count)
        if kind == "epoch":
            epoch = max(0, nxt.epoch + draw(st.integers(-1, 1)))
            return Sent(pid, epoch, draw(st.sampled_from([0, 0, 1, nxt.seq])), count)
        if kind == "wrap" and not done:
            return Sent(pid, 0, MOD - draw(st.integers(1, 3)), count)
        return Sent(pid, nxt.epoch, nxt.seq, count)

    @rule(data=st.data(), batches=st.integers(1, 3), write_fails=st.booleans())
    def produce(self, data: st.DataObject, batches: int, write_fails: bool) -> None:
        """One request of 1-3 batches; all are appended, or none."""
        pending = self.state.begin_append()
        planned = self.model.copy()
        offset = self.end
        encoded = []
        for _ in range(batches):
            sent = data.draw(self._sent(self))
            expected = planned.decide(sent, self.model)
            try:
                outcome = pending.check(
                    sent.pid, sent.epoch, sent.seq, sent.count - 1, self.ts, offset
                )
            except TidelogError as exc:
                event(exc.code)
                assert exc.code == expected, (sent, expected, exc)
                return
            event(type(outcome).__name__)
            if isinstance(outcome, Duplicate):
                assert isinstance(expected, Logged), (sent, expected, outcome)
                assert (outcome.batch.first_offset, outcome.batch.last_offset) == (
                    expected.first_offset,
                    expected.last_offset,
                )
                return  # answered with the original offsets; nothing is appended
            assert isinstance(outcome, Accepted) and expected == "ok", (sent, expected)
            planned.add(sent, offset, self.ts)
            batch = bytearray(
                encode_batch(
                    [(None, b"v", None, self.ts)] * sent.count,
                    producer_id=sent.pid,
                    producer_epoch=sent.epoch,
                    base_sequence=sent.seq,
                )
            )
            set_base_offset(batch, 0, offset)
            encoded.append((bytes(batch), offset + sent.count))
            offset += sent.count
        self.ts += 1
        if write_fails:
            return  # the caller drops `pending`: state and model stay as they were
        self.state.commit(pending, offset)
        self.model = planned
        for batch, end in encoded:
            self.log.append(batch)
            self.ends.append(end)

    @rule(pid=PIDS, below=st.integers(1, 3), count=st.integers(1, 3))
    def producer_resumes_near_the_wrap(self, pid: int, below: int, count: int) -> None:
        """A producer whose earlier batches are gone resumes just below the int32 wrap:
        its batch is in the log (as replayed at a restart), so later ones must wrap."""
        if pid in self.model.history:
            return
        sent = Sent(pid, 0, MOD - below, count)
        batch = bytearray(
            encode_batch(
                [(None, b"v", None, self.ts)] * count,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=sent.seq,
            )
        )
        set_base_offset(batch, 0, self.end)
        self.state.replay(h for _, h in iter_headers(batch))
        self.model.add(sent, self.end, self.ts)
        self.log.append(bytes(batch))
        self.ends.append(self.end + count)

    @rule(pid=st.integers(4, 5), count=st.integers(1, 3))
    def produce_without_idempotence(self, pid: int, count: int) -> None:
        pending = self.state.begin_append()
        pending.check(-1, -1, -1, count - 1, self.ts, self.end)
        batch = bytearray(encode_batch([(None, b"v", None, self.ts)] * count))
        set_base_offset(batch, 0, self.end)
        self.state.commit(pending, self.end + count)
        self.log.append(bytes(batch))
        self.ends.append(self.end + count)

    # ---- persistence ----------------------------------------------------------

    @rule()
    def snapshot(self) -> None:
        write_snapshot(self.io, self.dir, self.state.map_end_offset, self.state.entries())

    @precondition(lambda self: bool(list_snapshots(self.dir)))
    @rule(data=st.data())
    def tear_a_snapshot(self, data: st.DataObject) -> None:
        snapshots = list_snapshots(self.dir)
        _, path = data.draw(st.sampled_from(snapshots))
        content = path.read_bytes()
        if not content:
            return  # torn to nothing already
        cut = data.draw(st.integers(0, len(content) - 1))
        if data.draw(st.booleans()):
            path.write_bytes(content[:cut])
        else:
            damaged = bytearray(content)
            damaged[cut] ^= 0xFF
            path.write_bytes(bytes(damaged))

    def _restart(self) -> ProducerState:
        rebuilt = ProducerState("t-0")
        log = b"".join(self.log)
        restore(
            self.io,
            self.dir,
            rebuilt,
            log_start_offset=self.log_start,
            log_end_offset=self.end,
            now_ms=self.ts,
            read_headers=lambda _offset: (h for _, h in iter_headers(log)),
        )
        return rebuilt

    @rule()
    def restart(self) -> None:
        event(f"restart with {len(list_snapshots(self.dir))} snapshots")
        before = self.state.entries()
        self.state = self._restart()
        assert self.state.entries() == before
        assert self.state.map_end_offset == self.end

    @rule(data=st.data())
    def advance_log_start(self, data: st.DataObject) -> None:
        """Retention or DeleteRecords: any offset up to the end, mid-batch included."""
        self.log_start = data.draw(st.sampled_from(range(self.log_start, self.end + 1)))
        self.state.truncate_head(self.log_start)
        self.model.truncate_head(self.log_start)

    @precondition(lambda self: bool(self.log))
    @rule(data=st.data())
    def truncate_and_restart(self, data: st.DataObject) -> None:
        keeps = [
            k for k in range(len(self.log)) if (self.ends[k - 1] if k else 0) >= self.log_start
        ]
        if not keeps:
            return  # cannot cut below the log start
        keep = data.draw(st.sampled_from(keeps))
        del self.log[keep:]
        del self.ends[keep:]
        self.model.truncate(self.end)
        self.state = self._restart()
        assert self.state.map_end_offset == self.end

    @invariant()
    def state_matches_the_model(self) -> None:
        assert self.state.entries() == self.model.entries()


ProducerStateMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None
)
TestProducerState = ProducerStateMachine.TestCase
