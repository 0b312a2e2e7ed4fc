"""Idempotent appends through a real Log against a reference model (hypothesis stateful),
with rolls, crashes (the Log abandoned unclosed, as kill -9 leaves it), clean restarts,
a torn newest snapshot and retention.

The model keeps every batch the log acknowledged, per producer, and decides each
outcome: a retry of one of the producer's retained batches is answered with its
original offsets; the next sequence is stored; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER;
an unknown producer not at sequence 0 is UNKNOWN_PRODUCER_ID. After every step the
log holds exactly the model's records, each once. Producer 2 is a Kafka producer: its
batches are Kafka v2 ones, stored as sent beside the others' Tidelog batches.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.batch import KAFKA_LAYOUT, LAYOUT, encode_batch
from protocol.errors import OutOfOrderSequenceNumber, TidelogError, UnknownProducerId
from protocol.kafka.convert import tidelog_to_kafka
from storage.config import LogConfig
from storage.log import Log
from storage.producer_snapshot import list_snapshots
from storage.producer_state import BATCHES_RETAINED
from tests.storage.helpers import BASE_TS, open_test_log, read_all

PIDS = st.integers(1, 3)
KAFKA_PID = 2  # sends Kafka v2 batches
CONFIG = LogConfig(segment_bytes=600)  # a roll every few batches


@dataclass(frozen=True)
class Stored:
    seq: int
    count: int
    first_offset: int


class LogProducers(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="log-producers-"))
        self.log: Log = open_test_log(self.dir, CONFIG)
        self.stored: dict[int, list[Stored]] = {}  # acknowledged batches per producer
        self.records: list[tuple[int, bytes]] = []  # (offset, value) the log must hold
        self.tag = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _batch(self, pid: int, seq: int, count: int) -> tuple[bytes, list[bytes]]:
        self.tag += 1
        values = [b"%d:%d:%d" % (pid, seq + i, self.tag) for i in range(count)]
        data = encode_batch(
            [(b"k", v, None, BASE_TS) for v in values],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
        )
        if pid == KAFKA_PID:
            data = tidelog_to_kafka(data, partition_leader_epoch=-1)[0]
        return data, values

    def _send(self, pid: int, seq: int, count: int, expected: object) -> None:
        data, values = self._batch(pid, seq, count)
        try:
            info = self.log.append(data, layout=KAFKA_LAYOUT if pid == KAFKA_PID else LAYOUT)
        except TidelogError as exc:
            event(exc.code)
            assert expected == exc.code, (pid, seq, expected, exc)
            return
        if isinstance(expected, Stored):
            event("duplicate")
            assert info.duplicate and info.base_offset == expected.first_offset
            return
        event("stored")
        assert expected == "ok" and not info.duplicate, (pid, seq, expected)
        self.stored.setdefault(pid, []).append(Stored(seq, count, info.base_offset))
        self.records += [(info.base_offset + i, v) for i, v in enumerate(values)]

    @rule(pid=PIDS, count=st.integers(1, 3))
    def next_batch(self, pid: int, count: int) -> None:
        done = self.stored.get(pid, [])
        seq = done[-1].seq + done[-1].count if done else 0
        self._send(pid, seq, count, "ok")

    @precondition(lambda self: bool(self.stored))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(sorted(self.stored)))
        done = self.stored[pid]
        back = data.draw(st.integers(1, min(len(done), BATCHES_RETAINED + 2)))
        batch = done[-back]
        retained = back <= BATCHES_RETAINED
        expected = batch if retained else OutOfOrderSequenceNumber.code
        self._send(pid, batch.seq, batch.count, expected)

    @rule(pid=PIDS, skip=st.integers(1, 5))
    def gap(self, pid: int, skip: int) -> None:
        done = self.stored.get(pid, [])
        if not done:
            self._send(pid, skip, 1, UnknownProducerId.code)
            return
        self._send(pid, done[-1].seq + done[-1].count + skip, 1, OutOfOrderSequenceNumber.code)

    @rule()
    def crash_and_reopen(self) -> None:
        """kill -9: no close, no snapshot at the end; the written bytes survive."""
        self.log = open_test_log(self.dir, CONFIG, clean=False, recovery_point=0)

    @rule()
    def clean_restart(self) -> None:
        self.log.close()
        self.log = open_test_log(self.dir, CONFIG)

    @precondition(lambda self: bool(list_snapshots(self.dir)))
    @rule(cut=st.integers(0, 40))
    def tear_newest_snapshot_and_reopen(self, cut: int) -> None:
        self.log.close()
        _, path = list_snapshots(self.dir)[-1]
        path.write_bytes(path.read_bytes()[:cut])
        self.log = open_test_log(self.dir, CONFIG)

    @precondition(lambda self: self.log.segment_count > 2)
    @rule()
    def retention_deletes_the_oldest_segment(self) -> None:
        self.log.delete_oldest_segments(1, "test")
        start = self.log.log_start_offset
        self.records = [(o, v) for o, v in self.records if o >= start]
        for pid in list(self.stored):
            # What the log still holds of a producer: its batches ending at or past the start.
            kept = [b for b in self.stored[pid] if b.first_offset + b.count > start]
            if kept:
                self.stored[pid] = kept
            else:
                del self.stored[pid]  # unknown again: it must restart at sequence 0

    @invariant()
    def the_log_holds_each_acknowledged_record_once(self) -> None:
        assert read_all(self.log) == self.records


LogProducers.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLogProducers = LogProducers.TestCase
