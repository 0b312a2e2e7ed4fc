"""`__consumer_offsets` partition 0 as the group coordinator's log: read whole, appended.

The topic is compacted (the cleaner keeps the latest record per key) and created by
the broker on the first append, with `offsets.topic.segment.bytes`. Two record
types share it (broker/groups/records.py): offset commits, keyed
`[group, topic, partition]`, and group metadata, keyed `[group]`.

Reading is done once, at start, in a worker thread: a range that cannot be read
(fenced damage) is skipped to the next segment and a batch that cannot be decoded is
skipped, both counted, so one bad spot never stops every group. Appends come from
one writer (the group service) in the order the coordinator emitted them; each
Append is one batch, and one fsync covers all the batches of a call.

Thread safety: blocking calls, made from one worker thread at a time (the group
service serializes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.groups.messages import Record
from broker.logging import get_logger
from protocol.batch import decode_records, encode_batch, iter_headers
from protocol.errors import TidelogError, TopicAlreadyExists
from protocol.offsets_schema import OFFSETS_TOPIC
from storage.log import Log
from storage.manager import LogManager

log = get_logger(component="groups")

# The internal topic's cleanup policy when the broker creates it.
OFFSETS_TOPIC_POLICY = "compact"
# Bytes read per fetch while loading the topic.
LOAD_READ_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class OffsetsLogRead:
    """Every readable record of the topic, in log order, and what could not be read."""

    records: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)
    undecodable_records: int = 0  # records of batches whose payload did not decode
    unreadable_ranges: int = 0  # reads that failed; skipped to the next segment
    first_skipped_offset: int | None = None


def _next_segment_base(plog: Log, offset: int) -> int:
    """The first segment base above `offset`, or the high watermark (ends the read)."""
    bases = [info.base_offset for info in plog.segments_info() if info.base_offset > offset]
    return min(bases, default=plog.high_watermark)


class OffsetsLog:
    """Partition 0 of `__consumer_offsets` in one LogManager."""

    def __init__(self, manager: LogManager, segment_bytes: int) -> None:
        self._manager = manager
        self._topic_config = {
            "cleanup.policy": OFFSETS_TOPIC_POLICY,
            "segment.bytes": segment_bytes,
        }

    def _log(self, *, create: bool) -> Log | None:
        if OFFSETS_TOPIC not in self._manager.topics():
            if not create:
                return None
            try:
                self._manager.create_topic(OFFSETS_TOPIC, 1, self._topic_config)
            except TopicAlreadyExists:
                pass
        return self._manager.get_log(OFFSETS_TOPIC, 0)

    def read_all(self) -> OffsetsLogRead:
        """Every record from the log start to the high watermark (blocking)."""
        read = OffsetsLogRead()
        plog = self._log(create=False)
        if plog is None:
            return read
        policy = self._manager.topic_config(OFFSETS_TOPIC).cleanup_policy
        if policy != {OFFSETS_TOPIC_POLICY}:  # made by a client before it was refused
            log.warning("offsets_topic_misconfigured", cleanup_policy=sorted(policy))
        offset = plog.log_start_offset
        while offset < plog.high_watermark:
            try:
                data = plog.read(offset, LOAD_READ_BYTES).records
                headers = list(iter_headers(data))
            except TidelogError as exc:  # fenced damage: go on at the next segment
                read.unreadable_ranges += 1
                log.error("offsets_load_unreadable", offset=offset, error=exc.code)
                offset = _next_segment_base(plog, offset)
                continue
            if not headers:
                break
            for pos, header in headers:
                try:
                    batch = decode_records(data, pos)
                except TidelogError:
                    read.undecodable_records += header.record_count
                    if read.first_skipped_offset is None:
                        read.first_skipped_offset = header.base_offset
                else:
                    read.records.extend((record.key, record.value) for record in batch)
                offset = header.next_offset
        return read

    def append(self, batches: Sequence[Sequence[Record]], now_ms: int) -> None:
        """Append each entry of `batches` as one batch, in order, then fsync once."""
        plog = self._log(create=True)
        assert plog is not None
        last = -1
        for records in batches:
            if records:
                rows = [(key, value, None, now_ms) for key, value in records]
                last = plog.append(encode_batch(rows)).last_offset
        if last >= 0:
            plog.flush(last + 1)
