"""Put a stopped broker's older segments of one partition into the bucket only: what the
uploader and local retention leave behind, written here with boto3 and a manifest in
the documented format (docs/tiered-reads.md), so the read side is tested on its own."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from protocol.batch import (
    ANY_LAYOUT,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    BatchWalk,
)

OFFSET_DIGITS = 20


def _segment_facts(data: bytes) -> tuple[int, int, int, int]:
    """(last offset, first batch's max timestamp, max timestamp, layouts) of a whole `.log`."""
    last, first_ts, max_ts, layouts = -1, -1, -1, 0
    for _, fields in BatchWalk(data, whole=True, layout=ANY_LAYOUT):
        last = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA]
        if first_ts < 0:
            first_ts = fields[F_MAX_TIMESTAMP]
        max_ts = max(max_ts, fields[F_MAX_TIMESTAMP])
        layouts |= 1 << fields[F_MAGIC]
    return last, first_ts, max_ts, layouts


def tier_out(
    client: Any, bucket: str, partition_dir: Path, *, prefix: str = "tidelog", keep_local: int = 2
) -> list[dict[str, Any]]:
    """Upload every segment of `partition_dir` but the newest `keep_local` (`.log`,
    `.index`, `.timeindex`), write `remote-manifest.json` naming them
    COPY_SEGMENT_FINISHED with log start 0, and delete their local files. Returns the
    manifest's entries."""
    bases = sorted(int(p.stem) for p in partition_dir.glob("*.log"))
    assert len(bases) > keep_local, bases
    name = partition_dir.name
    topic, _, partition = name.rpartition("-")
    entries = []
    for base in bases[:-keep_local]:
        stem = f"{base:0{OFFSET_DIGITS}d}"
        segment_id = uuid.uuid4().hex
        data = (partition_dir / f"{stem}.log").read_bytes()
        last, first_ts, max_ts, layouts = _segment_facts(data)
        for suffix in (".log", ".index", ".timeindex"):
            path = partition_dir / f"{stem}{suffix}"
            key = f"{prefix}/{name}/{stem}-{segment_id}{suffix}"
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
        entries.append(
            {
                "segment_id": segment_id,
                "base_offset": base,
                "end_offset": last,
                "size_bytes": len(data),
                "base_timestamp_ms": first_ts,
                "max_timestamp_ms": max_ts,
                "layouts": layouts,
                "state": "COPY_SEGMENT_FINISHED",
                "updated_ms": 1,
            }
        )
        for leftover in partition_dir.glob(f"{stem}.*"):
            leftover.unlink()
    manifest = {
        "version": 1,
        "topic": topic,
        "partition": int(partition),
        "log_start_offset": 0,
        "segments": entries,
    }
    (partition_dir / "remote-manifest.json").write_text(json.dumps(manifest))
    return entries
