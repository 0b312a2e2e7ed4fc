"""`__transaction_state` partition 0: the transaction coordinator's log, read whole, appended.

One partition (Kafka has 50, one per coordinator shard; a single broker coordinates
every transactional id, so one is enough). Compacted, created by the broker on the
first append. Two kinds of record share it (broker/transactions/records.py):

- Kafka's TransactionLog key/value: one transactional id's metadata;
- Tidelog's pending transactional offsets (key version 1: transactional id + group),
  the TxnOffsetCommits of the open transaction, so a commit whose PrepareCommit
  was written before a crash still commits them after the restart.

Every append is fsynced before it returns: the coordinator answers only what the
log holds. Reading happens once, at start: an unreadable range is skipped to the
next segment and an undecodable batch skipped, both counted (as broker/offsets_log.py).

Thread safety: blocking calls, from one worker thread at a time (the service's
write lock serializes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.logging import get_logger
from protocol.batch import decode_records, encode_batch, iter_headers
from protocol.errors import TidelogError, TopicAlreadyExists
from protocol.offsets_schema import TRANSACTION_STATE_TOPIC
from storage.log import Log
from storage.manager import LogManager

__all__ = ["StateLog", "StateLogRead"]

log = get_logger(component="transactions")

LOAD_READ_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class StateLogRead:
    records: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    undecodable_records: int = 0
    unreadable_ranges: int = 0


class StateLog:
    """Partition 0 of `__transaction_state` in one LogManager."""

    def __init__(self, manager: LogManager, segment_bytes: int) -> None:
        self._manager = manager
        self._topic_config = {"cleanup.policy": "compact", "segment.bytes": segment_bytes}

    def _log(self, *, create: bool) -> Log | None:
        if TRANSACTION_STATE_TOPIC not in self._manager.topics():
            if not create:
                return None
            try:
                self._manager.create_topic(TRANSACTION_STATE_TOPIC, 1, self._topic_config)
            except TopicAlreadyExists:
                pass
        return self._manager.get_log(TRANSACTION_STATE_TOPIC, 0)

    def read_all(self) -> StateLogRead:
        read = StateLogRead()
        plog = self._log(create=False)
        if plog is None:
            return read
        offset = plog.log_start_offset
        while offset < plog.high_watermark:
            try:
                data = plog.read(offset, LOAD_READ_BYTES).records
                headers = list(iter_headers(data))
            except TidelogError as exc:
                read.unreadable_ranges += 1
                log.error("txn_state_load_unreadable", offset=offset, error=exc.code)
                bases = [i.base_offset for i in plog.segments_info() if i.base_offset > offset]
                offset = min(bases, default=plog.high_watermark)
                continue
            if not headers:
                break
            for pos, header in headers:
                try:
                    batch = decode_records(data, pos)
                except TidelogError:
                    read.undecodable_records += header.record_count
                else:
                    read.records.extend((record.key, record.value) for record in batch)
                offset = header.next_offset
        return read

    def append(self, records: Sequence[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Append `records` as one batch and fsync it (blocking)."""
        if not records:
            return
        plog = self._log(create=True)
        assert plog is not None
        rows = [(key, value, None, now_ms) for key, value in records]
        last = plog.append(encode_batch(rows)).last_offset
        plog.flush(last + 1)
