"""Planning cold reads: split each range at its partition's local log start offset.

A tiered partition (docs/tiered-storage.md) keeps its older segments only in the object
store. For every planned range the driver asks the broker which segment objects hold
its offsets (`remote_segments`, one request per topic); the part of the range below the
local log start becomes a range of its own carrying those objects (`ColdSource`), read
by its task straight from the bucket, and the rest stays a range read through the
broker. Splitting by `minPartitions` / `maxRecordsPerPartition` and coalescing happen
after, on both kinds alike (a piece keeps only the objects of its offsets).

`remoteReads`: `false` plans nothing cold; `auto` falls back to reading through the
broker when it does not serve `remote_segments` or names no objects; `true` fails then.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from protocol.errors import TidelogError
from protocol.remote_schema import API_NAME, PartitionSegments, remote_segments
from spark_connector.options import OptionError, SourceOptions
from spark_connector.planning import ColdSource, OffsetRange
from tidelog.client import Client

log = logging.getLogger("spark_connector")


def plan_cold(
    client: Client, opts: SourceOptions, ranges: Sequence[OffsetRange]
) -> list[OffsetRange]:
    """`ranges` with every part below a local log start turned into a cold range."""
    if opts.remote_reads == "false" or not ranges:
        return list(ranges)
    if API_NAME not in client.api_versions().get("apis", {}):
        if opts.remote_reads == "true":
            raise OptionError(
                "remoteReads=true, but the broker does not serve remote_segments (it has no "
                "tiered storage support): set remoteReads to auto or false"
            )
        return list(ranges)
    wanted: dict[str, dict[int, tuple[int, int]]] = {}
    for rng in ranges:
        wanted.setdefault(rng.topic, {})[rng.partition] = (rng.start, rng.end)
    answers: dict[tuple[str, int], PartitionSegments] = {}
    for topic, partitions in wanted.items():
        try:
            found = client.call(remote_segments(topic, partitions))
        except TidelogError as exc:
            if opts.remote_reads == "true":
                raise
            log.warning("remote_segments for %s failed (%s): reading it through the broker",
                        topic, exc)  # fmt: skip
            continue
        answers.update(((topic, p), answer) for p, answer in found.items())
    out: list[OffsetRange] = []
    for rng in ranges:
        out.extend(_split(rng, answers.get(rng.topic_partition), opts))
    return out


def _split(
    rng: OffsetRange, answer: PartitionSegments | None, opts: SourceOptions
) -> list[OffsetRange]:
    """[start, local start) from the bucket and [local start, end) through the broker."""
    if answer is None or answer.store is None or not answer.segments:
        return [rng]
    boundary = min(answer.local_log_start_offset, rng.end)
    if rng.start >= boundary:
        return [rng]
    first = answer.segments[0].base_offset
    start = max(rng.start, answer.log_start_offset)
    if first > start:  # the objects do not begin where the range does: not ours to read
        if opts.remote_reads == "true":
            raise OptionError(
                f"remoteReads=true, but offsets [{start}, {first}) of "
                f"{rng.topic}-{rng.partition} are in no remote segment the broker named"
            )
        return [rng]
    # The broker lists a bounded number of segments: past the last one, the broker reads.
    boundary = min(boundary, answer.segments[-1].end_offset + 1)
    cold = replace(
        rng,
        end=boundary,
        late_end=False,
        cold=ColdSource(answer.store, answer.segments, answer.aborted_transactions).within(
            rng.start, boundary
        ),
    )
    if boundary >= rng.end and not rng.late_end:
        return [cold]
    hot = replace(rng, start=boundary, late_start=False)
    return [cold, hot]
