"""A reference model of transactions in one partition (issue 36), with crash points.

Random sequences of non-transactional appends, transactional appends by several
producers, COMMIT/ABORT markers, rolls, clean restarts and crashes (the log dropped
without a close and reopened from its files, as after kill -9: what was written is in
the page cache, no final snapshot, no clean-shutdown marker) are applied to a real
`Log` and to an in-memory model. After every step the LSO, the open transactions,
the aborted-transaction lists and what a read_committed reader sees (Kafka's
consumer algorithm over fetches of a few hundred bytes, `AbortedFilter`) must match
the model; a read_uncommitted reader sees every data record.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import crc32c
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.batch import KAFKA_LAYOUT, encode_batch
from protocol.kafka import records as kafka
from protocol.kafka.control import AbortedFilter
from protocol.kafka.convert import tidelog_to_kafka
from storage.config import LogConfig
from storage.log import Log
from tests.storage.helpers import BASE_TS, open_test_log

PRODUCERS = (101, 202, 303)
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=64)
FETCH_BYTES = 300


def _batch(values: list[bytes], producer: int, sequence: int, *, txn: bool) -> bytes:
    source = encode_batch(
        [(b"k", v, None, BASE_TS) for v in values],
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=sequence,
    )
    data = bytearray(tidelog_to_kafka(source, partition_leader_epoch=-1)[0])
    if txn:
        attributes = struct.unpack_from(">h", data, 21)[0] | kafka.TRANSACTIONAL_MASK
        struct.pack_into(">h", data, 21, attributes)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def read_committed(log: Log) -> tuple[list[bytes], set[tuple[int, int]]]:
    """Values a read_committed Kafka consumer gets from the log start, and every
    aborted transaction the fetches named."""
    offset, values, named = log.log_start_offset, [], set()
    while True:
        data = log.read(offset, FETCH_BYTES, committed=True)
        if not data.records:
            return values, named
        named.update(data.aborted_transactions)
        skip = AbortedFilter(data.aborted_transactions)
        pos, records = 0, data.records
        while pos < len(records):
            header = kafka.read_batch_header(records, pos)
            attributes = header.attributes
            if header.next_offset > offset:
                if attributes & kafka.CONTROL_MASK:
                    skip.marker(records, pos, header)
                elif attributes & kafka.TRANSACTIONAL_MASK and skip.aborted(header):
                    pass
                else:
                    if header.producer_id >= 0:
                        skip.consume_up_to(header.last_offset)
                    body = records[pos + kafka.HEADER_SIZE : pos + header.size]
                    values += [r[3] for r in kafka.decode_records(body, header.record_count)]
                offset = header.next_offset
            pos += header.size


def read_uncommitted(log: Log) -> list[bytes]:
    offset, values = log.log_start_offset, []
    while offset < log.high_watermark:
        records = log.read(offset, FETCH_BYTES).records
        pos = 0
        while pos < len(records):
            header = kafka.read_batch_header(records, pos)
            if header.next_offset > offset and not header.attributes & kafka.CONTROL_MASK:
                body = records[pos + kafka.HEADER_SIZE : pos + header.size]
                values += [r[3] for r in kafka.decode_records(body, header.record_count)]
            offset = max(offset, header.next_offset)
            pos += header.size
    return values


class TxnLogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="txn-model-"))
        self.log = open_test_log(self.directory, CONFIG)
        self.end = 0
        # (first offset, producer id or -1, values, state: "plain" | "open" | pid's txn id)
        self.entries: list[dict[str, Any]] = []
        self.open: dict[int, int] = {}  # producer -> first offset of its open transaction
        self.txn_of: dict[int, list[dict[str, Any]]] = {}  # producer -> its open batches
        self.aborted: set[tuple[int, int]] = set()
        self.sequence = dict.fromkeys(PRODUCERS, 0)
        self.counter = 0

    def teardown(self) -> None:
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _values(self, count: int) -> list[bytes]:
        self.counter += 1
        return [b"v%d-%d" % (self.counter, i) for i in range(count)]

    @rule(count=st.integers(1, 3))
    def append_plain(self, count: int) -> None:
        values = self._values(count)
        info = self.log.append(_batch(values, -1, -1, txn=False), layout=KAFKA_LAYOUT)
        assert info.base_offset == self.end
        self.entries.append({"first": self.end, "values": values, "state": "committed"})
        self.end += count

    @rule(producer=st.sampled_from(PRODUCERS), count=st.integers(1, 3))
    def append_txn(self, producer: int, count: int) -> None:
        values = self._values(count)
        batch = _batch(values, producer, self.sequence[producer], txn=True)
        info = self.log.append(batch, layout=KAFKA_LAYOUT)
        assert info.base_offset == self.end
        self.sequence[producer] += count
        entry = {"first": self.end, "values": values, "state": "open"}
        self.entries.append(entry)
        self.open.setdefault(producer, self.end)
        self.txn_of.setdefault(producer, []).append(entry)
        self.end += count

    @rule(producer=st.sampled_from(PRODUCERS), commit=st.booleans())
    def marker(self, producer: int, commit: bool) -> None:
        offset = self.log.append_txn_marker(
            producer, 0, commit=commit, coordinator_epoch=0, append_time_ms=BASE_TS, sync=False
        )
        assert offset == self.end
        self.end += 1
        first = self.open.pop(producer, None)
        for entry in self.txn_of.pop(producer, []):
            entry["state"] = "committed" if commit else "aborted"
        if first is not None and not commit:
            self.aborted.add((producer, first))

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def restart(self) -> None:
        self.log.close()
        self.log = open_test_log(self.directory, CONFIG)

    @rule()
    def crash(self) -> None:
        """kill -9: the Log is dropped without a close (no final snapshot); the written
        bytes are in the page cache, so the reopened log finds them."""
        self.log._local.close()  # release descriptors only: nothing is flushed or written
        self.log = open_test_log(self.directory, CONFIG, clean=False)

    @precondition(lambda self: self.end > 0)
    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        assert log.high_watermark == self.end
        lso = min(self.open.values(), default=self.end)
        assert log.last_stable_offset == lso
        assert log.ongoing_transactions() == self.open
        values, named = read_committed(log)
        expected = [
            v
            for e in self.entries
            if e["state"] == "committed" and e["first"] < lso
            for v in e["values"]
        ]
        assert values == expected
        assert named == {a for a in self.aborted if a[1] < lso}
        assert read_uncommitted(log) == [v for e in self.entries for v in e["values"]]


TxnLogModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_txn_log_model = TxnLogModel.TestCase
