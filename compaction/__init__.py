"""The log cleaner: choosing the filthiest log, the offset map, recopying segments
and the crash-safe swap of cleaned segments.

It imports `protocol` and storage's public API (`storage`, typed as the Protocols
of `compaction.ports`) only: it reads and writes segments through the log, never by
path. The broker schedules it and runs the cleaning in a worker thread.

Modules, each one job: `choice` (clean/cleanable sections, dirty ratio, filthiest
log), `offset_map` (numpy map of key digests to latest offsets), `keys` (decoding
only offset deltas and keys), `mapping` (building the map over the dirty section),
`recopy` (which records of a batch survive), `grouping` (segments per cleaned
segment), `ports` (what it needs of a log), `cleaner` (one cleaning), `manager`
(choice, checkpoint, failures, statistics), `service` (the workers the broker
runs), `throttle`, `config`. docs/compaction.md
explains the rules.
"""

from compaction.choice import (
    CleanableRange,
    LogToClean,
    SegmentView,
    choose_filthiest,
    cleanable_range,
    max_compaction_delay_ms,
)
from compaction.cleaner import Cleaner, CleaningAborted, CleaningResult
from compaction.config import CleanerConfig
from compaction.manager import CleanerManager, CleanerStatistics, LogCleanerState
from compaction.offset_map import OffsetMap
from compaction.service import CleanerService

__all__ = [
    "CleanableRange",
    "Cleaner",
    "CleanerConfig",
    "CleanerManager",
    "CleanerService",
    "CleanerStatistics",
    "CleaningAborted",
    "CleaningResult",
    "LogCleanerState",
    "LogToClean",
    "OffsetMap",
    "SegmentView",
    "choose_filthiest",
    "cleanable_range",
    "max_compaction_delay_ms",
]
