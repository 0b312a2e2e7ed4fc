"""The oracle of the tiered crash and fault tests: did the broker keep what it
acknowledged, across both tiers, and is the bucket consistent with the manifests?

Records are read back through the broker (tests/reliability/oracle.py's `fetch_all`),
which serves offsets below the local log start from the store: every acknowledged
record at or above the log start offset must be at its offset with its bytes, offsets
contiguous, no record twice. The segment files cannot be scanned as the durability
suite does (most of the data is no longer local); instead the bucket is checked
against each partition's manifest (`remote-manifest.json`, docs/tiered-storage.md):

- segment ids are unique and every object key names one entry (no object is
  referenced twice); readable (COPY_SEGMENT_FINISHED) entries never overlap;
- every readable entry's `.log` object exists with the entry's size;
- objects naming no entry, or an entry that is not readable, are orphans (a crash
  between PUT and manifest write leaves them); `orphans` lists them for the sweep check.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.oracle import Ledger, fetch_all
from tidelog.client import Client

MANIFEST_FILE = "remote-manifest.json"
READABLE = "COPY_SEGMENT_FINISHED"
_OBJECT = re.compile(r"^(\d{20})-([0-9a-f]{32})(\.[a-z]+)$")


@dataclass
class BucketCheck:
    problems: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)  # keys no readable entry names
    readable_segments: int = 0
    objects: int = 0


def verify_records(
    client: Client, ledger: Ledger, partitions: Mapping[str, int]
) -> tuple[list[str], dict[tuple[str, int], int]]:
    """Every acknowledged record readable through the broker; the problems, and each
    partition's log start offset."""
    problems: list[str] = []
    starts: dict[tuple[str, int], int] = {}
    for topic, count in partitions.items():
        for partition in range(count):
            where = f"{topic}-{partition}"
            start, hwm, fetched = fetch_all(client, topic, partition, problems)
            starts[(topic, partition)] = start
            offsets = [r.offset for r in fetched]
            if offsets != list(range(start, hwm)):
                missing = sorted(set(range(start, hwm)) - set(offsets))[:10]
                problems.append(f"{where}: offsets [{start}, {hwm}) not all served: {missing}")
            by_offset = {r.offset: r for r in fetched}
            seen: set[str] = set()
            for record in fetched:
                if record.record_id in seen:
                    problems.append(f"{where}: {record.record_id} twice")
                if record.record_id is not None:
                    seen.add(record.record_id)
            for ack in ledger.for_partition(topic, partition):
                if ack.offset < start:
                    continue  # retention may delete acknowledged records (remote too)
                stored = by_offset.get(ack.offset)
                if stored is None:
                    problems.append(f"{where}: acked {ack.record_id} lost at {ack.offset}")
                elif stored.record_id != ack.record_id or stored.value_sha != ack.value_sha:
                    problems.append(
                        f"{where}: offset {ack.offset} holds {stored.record_id}, "
                        f"acked {ack.record_id}"
                    )
    return problems, starts


def read_manifest(data_dir: Path, topic: str, partition: int) -> dict[str, Any] | None:
    path = data_dir / f"{topic}-{partition}" / MANIFEST_FILE
    if not path.exists():
        return None
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def check_bucket(
    s3: Any, bucket: str, prefix: str, data_dir: Path, partitions: Mapping[str, int]
) -> BucketCheck:
    """The bucket against every partition's manifest (see the module doc)."""
    check = BucketCheck()
    for topic, count in partitions.items():
        for partition in range(count):
            _check_partition(s3, bucket, prefix, data_dir, topic, partition, check)
    return check


def _list(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def _check_partition(
    s3: Any,
    bucket: str,
    prefix: str,
    data_dir: Path,
    topic: str,
    partition: int,
    check: BucketCheck,
) -> None:
    where = f"{topic}-{partition}"
    directory = f"{prefix}/{topic}-{partition}/"
    objects = _list(s3, bucket, directory)
    check.objects += len(objects)
    manifest = read_manifest(data_dir, topic, partition) or {"segments": []}
    entries = manifest["segments"]
    ids = [e["segment_id"] for e in entries]
    if len(ids) != len(set(ids)):
        check.problems.append(f"{where}: a segment id appears twice in the manifest")
    by_id = {e["segment_id"]: e for e in entries}
    readable = sorted(
        (e for e in entries if e["state"] == READABLE), key=lambda e: e["base_offset"]
    )
    check.readable_segments += len(readable)
    for before, after in itertools.pairwise(readable):
        if after["base_offset"] <= before["end_offset"]:
            check.problems.append(
                f"{where}: readable segments {before['segment_id']} and "
                f"{after['segment_id']} overlap"
            )
    for entry in readable:
        key = f"{directory}{entry['base_offset']:020d}-{entry['segment_id']}.log"
        if objects.get(key) != entry["size_bytes"]:
            check.problems.append(
                f"{where}: readable {key} is {objects.get(key)} bytes, not {entry['size_bytes']}"
            )
    for key in objects:
        name = key[len(directory) :]
        if name == "manifest.json":
            continue
        match = _OBJECT.match(name)
        if match is None:
            check.problems.append(f"{where}: unexpected object {key}")
            continue
        entry = by_id.get(match.group(2))
        if entry is not None and int(match.group(1)) != entry["base_offset"]:
            check.problems.append(f"{where}: {key} names {entry['segment_id']} at another offset")
        if entry is None or entry["state"] != READABLE:
            check.orphans.append(key)
