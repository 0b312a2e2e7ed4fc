"""The scenarios with kcat (Debian's kcat 1.7.1 on librdkafka 2.0.2), as a subprocess.

kcat has no admin commands and no producer timestamps, so it runs three scenarios
(`SUPPORTED`) on a topic it auto-creates (one partition): records carry the producer's
clock, which `interop.compare` normalises. Each sample is one `kcat -P` run (headers and
`-Z` for a null value apply per run); records are read back with a length-prefixed
`-f` format, so binary keys and values survive.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from interop.observed import (
    CREATE_TIME,
    SCENARIO_TIMEOUT_S,
    Sample,
    observed_record,
    samples_for,
    sort_records,
)

SUPPORTED = ("produce_consume", "group_consume", "offsets")
PARTITIONS = 1
# Message and key delimiters for `kcat -P`: strings that no sample key or value contains.
MESSAGE_DELIMITER = b"\n%END%\n"
KEY_DELIMITER = b"#KEY#"
# One record per header line: partition, offset, timestamp (ms), key and value
# lengths (-1 = null), headers; then the key and value bytes and a newline.
CONSUME_FORMAT = r"%p %o %T %K %S %h\n%k%s\n"
ASSIGNED = re.compile(r"assigned: (.*)$", re.MULTILINE)
ASSIGNED_PARTITION = re.compile(r"(\S+) \[(\d+)\]")
QUERY_OFFSET = re.compile(r"\[(\d+)\] offset (-?\d+)")
# librdkafka's logical offsets for `kcat -Q`: -2 = earliest, -1 = latest.
OFFSET_EARLIEST = -2
OFFSET_LATEST = -1


def kcat_binary() -> str:
    kcat = shutil.which("kcat")
    if kcat is None:
        raise RuntimeError("kcat is not installed: apt-get install kcat")
    return kcat


def _run(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(
        [kcat_binary(), *args],
        input=stdin,
        capture_output=True,
        timeout=SCENARIO_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr!r}")
    return result


def _produce_one(bootstrap: str, topic: str, sample: Sample, codec: str) -> None:
    args = ["-P", "-b", bootstrap, "-t", topic, "-p", str(sample.partition), "-z", codec]
    args += ["-D", MESSAGE_DELIMITER.decode(), "-K", KEY_DELIMITER.decode()]
    for name, value in sample.headers:
        args += ["-H", f"{name}={value.decode()}"]
    if sample.value is None:
        args.append("-Z")  # an empty value is sent as null (and so is an empty key)
    message = b"" if sample.key is None else sample.key + KEY_DELIMITER
    _run(args, message + (sample.value or b"") + MESSAGE_DELIMITER)


def _produce_samples(bootstrap: str, topic: str, codec: str = "none") -> None:
    for sample in samples_for(PARTITIONS):
        _produce_one(bootstrap, topic, sample, codec)


def parse_records(out: bytes) -> list[dict[str, Any]]:
    """Records printed with `CONSUME_FORMAT`."""
    records = []
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        fields = out[pos:end].decode().split(" ", 5)
        partition, offset, ts_field, key_len, value_len = (int(f) for f in fields[:5])
        pos = end + 1
        key, pos = _take(out, pos, key_len)
        value, pos = _take(out, pos, value_len)
        pos += 1  # the record's closing newline
        headers = [tuple(h.split("=", 1)) for h in fields[5].split(",") if h] if fields[5:] else []
        records.append(
            observed_record(
                partition,
                offset,
                key,
                value,
                [(name, val.encode()) for name, val in headers],
                ts_field,
                CREATE_TIME,
            )
        )
    return sort_records(records)


def _take(out: bytes, pos: int, length: int) -> tuple[bytes | None, int]:
    if length < 0:
        return None, pos
    return out[pos : pos + length], pos + length


def _consume(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    out = _run(
        [
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            CONSUME_FORMAT,
        ]
    ).stdout
    return parse_records(out)


def produce_consume(bootstrap: str, topic: str, codec: str) -> dict[str, Any]:
    _produce_samples(bootstrap, topic, codec)
    return {"records": _consume(bootstrap, topic)}


def _group_run(bootstrap: str, topic: str, group: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """One balanced-consumer run to the end of the topic, committing on close."""
    result = _run(
        [
            *("-b", bootstrap, "-G", group, "-e", "-f", CONSUME_FORMAT),
            *("-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=50", topic),
        ]
    )
    stderr = result.stderr.decode(errors="replace")
    assigned = sorted(
        (t, int(p))
        for line in ASSIGNED.findall(stderr)
        for t, p in ASSIGNED_PARTITION.findall(line)
    )
    return parse_records(result.stdout), assigned


def group_consume(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    _produce_samples(bootstrap, topic)
    records, assignment = _group_run(bootstrap, topic, group)
    # A second member of the same group starts from the committed offsets: nothing left.
    again, _ = _group_run(bootstrap, topic, group)
    return {"assignment": assignment, "records": records, "records_after_rejoin": len(again)}


def _query(bootstrap: str, topic: str, timestamp: int) -> int | None:
    out = _run(["-Q", "-b", bootstrap, "-t", f"{topic}:0:{timestamp}"]).stdout.decode()
    match = QUERY_OFFSET.search(out)
    if match is None:
        raise RuntimeError(f"kcat -Q printed no offset: {out!r}")
    offset = int(match.group(2))
    return None if offset < 0 else offset


def offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    """kcat stamps records with its own clock (one run per record, so the stamps rise):
    look up each record's own timestamp, one before the first and one after the last."""
    _produce_samples(bootstrap, topic)
    stamps = [r["timestamp_ms"] for r in _consume(bootstrap, topic)]
    lookups = {
        "before_first": stamps[0] - 1,
        **{f"record{i}": ts for i, ts in enumerate(stamps)},
        "after_last": stamps[-1] + 1,
    }
    return {
        "earliest": {0: _query(bootstrap, topic, OFFSET_EARLIEST)},
        "latest": {0: _query(bootstrap, topic, OFFSET_LATEST)},
        "for_times": {label: {0: _query(bootstrap, topic, ts)} for label, ts in lookups.items()},
    }
