"""`tidelog retention explain` for a tiered topic: both tiers' verdicts per segment.

Reads the partition's manifest from its directory (the broker's truth; blocking: the
handler calls this in a worker thread) and the log's segment metadata, then asks
retention.tiered.explain_tiered, which runs the same rules as the
`remote-log-manager` task.
"""

from __future__ import annotations

from typing import Any

from retention.rules import RetentionSettings
from retention.tiered import explain_tiered, local_settings
from storage.fileio import FileIO
from storage.log import Log
from storage.remote import Manifest, read_manifest

__all__ = ["explain_tiered_log"]


class _Meta:
    __slots__ = ("base_offset", "is_active", "largest_timestamp_ms", "mtime_ms", "next_offset",
                 "size_bytes")  # fmt: skip

    def __init__(self, base: int, next_offset: int, size: int, ts: int, mtime: int) -> None:
        self.base_offset, self.next_offset, self.size_bytes = base, next_offset, size
        self.largest_timestamp_ms, self.mtime_ms, self.is_active = ts, mtime, False


def explain_tiered_log(log: Log, now_ms: int) -> dict[str, Any]:
    manifest = read_manifest(FileIO(), log.directory) or Manifest(log.topic, log.partition)
    config = log.config
    local = log.segments_info()
    readable = manifest.readable()
    remote = [
        _Meta(s.base_offset, s.next_offset, s.size_bytes, s.max_timestamp_ms, s.updated_ms)
        for s in readable
    ]
    uploaded_end = local[0].base_offset if local else 0
    for info in local:
        if info.is_active or not manifest.covers(info.base_offset, info.next_offset):
            break
        uploaded_end = info.next_offset
    return explain_tiered(
        local,
        remote,
        RetentionSettings.from_config(config),
        local_settings(
            config.effective_local_retention_ms,
            config.effective_local_retention_bytes,
            frozenset(config.cleanup_policy),
        ),
        log.log_start_offset,
        log.high_watermark,
        uploaded_end,
        manifest.remote_end_offset,
        now_ms,
    )
