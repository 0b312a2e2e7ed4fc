"""A partition's segment map: every segment with the retention verdict and its reason.

The verdicts are the `explain_retention` API's (retention/explain.py, the rules
`tidelog retention explain` prints and the next retention pass applies), asked as
the principal, so it needs DescribeConfigs on the topic as the CLI does. Beside
them: each segment's index files, and for a compacted topic the cleaner's figures
(dirty ratio, cleaned-up-to checkpoint) and whether the segment is below it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from broker.console.acting import first_error
from broker.console.base import Call
from broker.console.http import Response
from broker.console.render import esc, link, page, size, table, url, when
from protocol.errors import InvalidRequest
from retention.explain import format_duration_ms
from storage.files import index_path, time_index_path


def _index_state(directory: Path, base: int) -> str:
    """Whether the segment's offset and time indexes are on disk, and their sizes."""
    out = []
    for label, path in (("offset", index_path), ("time", time_index_path)):
        try:
            out.append(f"{label} {size(os.stat(path(directory, base)).st_size)}")
        except OSError:
            out.append(f"{label} absent (rebuilt when read)")
    return esc(", ".join(out))


def _compaction(call: Call, topic: str, partition: int) -> tuple[str, int | None]:
    """The cleaner's summary of this partition, and its cleaned-up-to offset."""
    cleaner = call.broker.cleaner
    if cleaner is None:
        return "<p>The log cleaner is not running.</p>", None
    stats = cleaner.statistics()
    state = stats.logs.get((topic, partition))
    checkpoint = cleaner.manager.checkpoint(topic, partition)
    figures = [
        ("Cleaned up to offset", "-" if checkpoint is None else str(checkpoint)),
        ("Dirty ratio", "-" if state is None else f"{state.dirty_ratio:.3f}"),
        ("Cleanable bytes", "-" if state is None else size(state.cleanable_bytes)),
        (
            "Compaction delay",
            "-" if state is None else format_duration_ms(state.compaction_delay_ms),
        ),
        ("Uncleanable", "yes" if (topic, partition) in stats.uncleanable else "no"),
    ]
    rows = [[esc(k), esc(v)] for k, v in figures]
    return table(("Compaction", "Value"), rows, "Log cleaner"), checkpoint


def _segment_row(
    seg: dict[str, Any], directory: Path, compacted: bool, checkpoint: int | None
) -> list[str]:
    verdict = str(seg["verdict"])
    cls = "verdict-delete" if seg["deletable"] else "verdict-keep"
    cleaned = "-"
    if compacted:
        if seg["is_active"]:
            cleaned = "active (never cleaned)"
        elif checkpoint is not None and seg["next_offset"] <= checkpoint:
            cleaned = "cleaned"
        else:
            cleaned = "dirty"
    last = seg["next_offset"] - 1
    return [
        str(seg["base_offset"]),
        str(last) if last >= seg["base_offset"] else "(empty)",
        esc(when(seg["largest_timestamp_ms"])),
        esc(format_duration_ms(seg["age_ms"]))
        + (" (from mtime)" if seg["timestamp_from_mtime"] else ""),
        size(seg["size_bytes"]),
        _index_state(directory, seg["base_offset"]),
        "local disk",
        f'<span class="{cls}" data-verdict="{esc(verdict)}">{esc(verdict)}</span>',
        esc(seg["reason"]),
        esc(cleaned),
    ]


async def segments(call: Call) -> Response:
    topic, partition_text = call.params
    if not partition_text.isdigit():
        raise InvalidRequest(f"partition: not a number: {partition_text!r}")
    partition = int(partition_text)
    answer = await call.actor.call("explain_retention", {"topic": topic, "partitions": [partition]})
    [explained] = answer["partitions"]
    error = first_error([explained])
    if error is not None:
        raise error
    directory = call.ctx.manager.get_log(topic, partition).directory
    compacted = "compact" in explained["cleanup_policy"]
    compaction_html, checkpoint = _compaction(call, topic, partition)
    if not compacted:
        compaction_html = (
            "<p>cleanup.policy has no <code>compact</code>: "
            "the log cleaner leaves this partition alone.</p>"
        )
    rows = [_segment_row(s, directory, compacted, checkpoint) for s in explained["segments"]]
    settings = (
        f"retention.ms={explained['retention_ms']}, "
        f"retention.bytes={explained['retention_bytes']}, "
        f"cleanup.policy={','.join(explained['cleanup_policy'])}, "
        f"{explained['deletable_segments']} segments ({size(explained['deletable_bytes'])}) "
        "deletable at the next retention pass"
    )
    body = (
        f"<p>{link(url('topic', topic), 'Topic ' + topic)} · "
        f"{link(url('topic', topic, 'partition', partition, 'records'), 'browse records')}</p>"
        f"<p>Offsets {explained['log_start_offset']} to {explained['high_watermark']} "
        f"(end {explained['log_end_offset']}), {size(explained['size_bytes'])}; "
        f"verdicts at {esc(when(explained['now_ms']))}: {esc(settings)}.</p>"
        + table(
            (
                "Base offset",
                "Last offset",
                "Newest record",
                "Age",
                "Size",
                "Indexes",
                "Stored",
                "Retention verdict",
                "Reason",
                "Compaction",
            ),
            rows,
            "Segments",
        )
        + compaction_html
    )
    return page(call.view, "topics", f"{topic} partition {partition}: segments", body)
