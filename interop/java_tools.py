"""Apache Kafka's own command-line tools against any bootstrap address, output parsed.

Each tool is what Kafka's `bin/*.sh` script runs (`java -cp <jars> <main class>`), with
Kafka 4.x's option names. The `parse_*` functions are pure, so the formats are written
down once; the wrappers raise `ToolError` (with the tool's stderr) on a non-zero exit.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interop.jvm import TOOLS_HEAP_MB, TOOLS_LOG4J, java_argv

TOPICS = "org.apache.kafka.tools.TopicCommand"  # kafka-topics.sh
CONFIGS = "org.apache.kafka.tools.ConfigCommand"  # kafka-configs.sh
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"  # kafka-dump-log.sh
ACLS = "org.apache.kafka.tools.AclCommand"  # kafka-acls.sh
# A tool that has not finished by then is stuck (a JVM start is ~1-3 s here).
TOOL_TIMEOUT_S = 300.0
# kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh give their JVM 512 MB
# (the other scripts 256 MB): the producer's 32 MB buffer churns a smaller heap.
PERF_HEAP_MB = 512
# How long the console consumer waits for a record before it gives up.
CONSOLE_CONSUMER_IDLE_MS = 20_000


class ToolError(RuntimeError):
    """A Kafka tool exited non-zero; the message carries its arguments and stderr."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    stdout: str
    stderr: str


def run_tool(
    main_class: str,
    args: Sequence[str],
    *,
    stdin: str = "",
    timeout_s: float = TOOL_TIMEOUT_S,
    heap_mb: int = TOOLS_HEAP_MB,
) -> ToolResult:
    argv = java_argv(main_class, args, heap_mb=heap_mb, log4j=TOOLS_LOG4J)
    result = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        name = main_class.rsplit(".", 1)[-1]
        raise ToolError(f"{name} {' '.join(args)} exited {result.returncode}: {result.stderr}")
    return ToolResult(result.stdout, result.stderr)


# kafka-topics


def create_topic(
    bootstrap: str, topic: str, partitions: int, configs: Mapping[str, str] | None = None
) -> str:
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic]
    args += ["--partitions", str(partitions)]
    for key, value in (configs or {}).items():
        args += ["--config", f"{key}={value}"]
    return run_tool(TOPICS, args).stdout.strip()


def list_topics(bootstrap: str) -> list[str]:
    out = run_tool(TOPICS, ["--bootstrap-server", bootstrap, "--list"]).stdout
    return sorted(line.strip() for line in out.splitlines() if line.strip())


def describe_topic(bootstrap: str, topic: str) -> dict[str, Any]:
    out = run_tool(TOPICS, ["--bootstrap-server", bootstrap, "--describe", "--topic", topic])
    return parse_topic_description(out.stdout)


def delete_topic(bootstrap: str, topic: str) -> None:
    run_tool(TOPICS, ["--bootstrap-server", bootstrap, "--delete", "--topic", topic])


def parse_topic_description(out: str) -> dict[str, Any]:
    """`--describe` output: a tab-separated summary line, then one line per partition."""
    topic: dict[str, Any] = {"partitions": []}
    for line in out.splitlines():
        fields = dict(_tab_fields(line))
        if "PartitionCount" in fields:
            topic["name"] = fields["Topic"]
            topic["partition_count"] = int(fields["PartitionCount"])
            topic["replication_factor"] = int(fields["ReplicationFactor"])
            configs = fields.get("Configs", "")
            topic["configs"] = dict(kv.split("=", 1) for kv in configs.split(",") if kv)
        elif "Partition" in fields:
            topic["partitions"].append(
                {"partition": int(fields["Partition"]), "leader": int(fields["Leader"])}
            )
    return topic


def _tab_fields(line: str) -> list[tuple[str, str]]:
    pairs = []
    for cell in line.strip().split("\t"):
        name, sep, value = cell.partition(":")
        if sep:
            pairs.append((name.strip(), value.strip()))
    return pairs


# kafka-configs


def alter_topic_config(bootstrap: str, topic: str, configs: Mapping[str, str]) -> None:
    added = ",".join(f"{key}={value}" for key, value in configs.items())
    run_tool(
        CONFIGS,
        [
            *("--bootstrap-server", bootstrap, "--alter", "--entity-type", "topics"),
            *("--entity-name", topic, "--add-config", added),
        ],
    )


def describe_topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's dynamic (per-topic) configs, as kafka-configs lists them."""
    out = run_tool(
        CONFIGS,
        [
            *("--bootstrap-server", bootstrap, "--describe", "--entity-type", "topics"),
            *("--entity-name", topic),
        ],
    ).stdout
    return parse_config_description(out)


CONFIG_LINE = re.compile(r"^\s+([\w.]+)=(\S*) sensitive=")


def parse_config_description(out: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in map(CONFIG_LINE.match, out.splitlines()) if m}


# console producer / consumer


def console_produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[str | None, str]],
    acks: str = "all",
    headers: Sequence[Sequence[tuple[str, str]]] | None = None,
) -> None:
    """Send `(key, value)` lines through kafka-console-producer (keys split on a tab);
    with `headers` (one list per record), each line starts with `h1:v1,h2:v2` and a tab."""
    prefixes = [_header_text(h) + "\t" for h in headers] if headers is not None else None
    lines = "".join(
        f"{prefixes[i] if prefixes else ''}{key}\t{value}\n"
        for i, (key, value) in enumerate(records)
    )
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic),
        *("--producer-property", f"acks={acks}"),
        *("--reader-property", "parse.key=true", "--reader-property", "key.separator=\t"),
    ]
    if headers is not None:
        args += ["--reader-property", "parse.headers=true"]
    run_tool(CONSOLE_PRODUCER, args, stdin=lines)


def _header_text(headers: Sequence[tuple[str, str]]) -> str:
    """The console producer's header syntax (`h1:v1,h2:v2`): it has none for "no
    headers" (the consumer prints NO_HEADERS, which the producer refuses)."""
    if not headers:
        raise ValueError("with parse.headers every line needs at least one header")
    return ",".join(f"{name}:{value}" for name, value in headers)


NO_HEADERS = "NO_HEADERS"


def console_consume(
    bootstrap: str,
    topic: str,
    max_messages: int,
    group: str | None = None,
    *,
    from_beginning: bool = True,
    headers: bool = False,
) -> list[dict[str, Any]]:
    """Read `max_messages` (from the beginning, or from the group's committed offsets)
    with kafka-console-consumer; `headers` prints and parses each record's headers."""
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic),
        *("--max-messages", str(max_messages), "--timeout-ms", str(CONSOLE_CONSUMER_IDLE_MS)),
    ]
    if from_beginning:
        args.append("--from-beginning")
    props = ["print.timestamp", "print.partition", "print.offset", "print.key"]
    if headers:
        props.append("print.headers")
    for prop in props:
        args += ["--formatter-property", f"{prop}=true"]
    if group is not None:
        args += ["--group", group]
    return parse_console_records(run_tool(CONSOLE_CONSUMER, args).stdout, headers=headers)


@contextmanager
def running_console_consumer(bootstrap: str, topic: str, group: str) -> Iterator[None]:
    """A kafka-console-consumer of `group` reading `topic` from the beginning until the
    block ends (then killed: the group keeps its member until the session times out)."""
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic, "--group", group),
        *("--from-beginning", "--timeout-ms", str(int(TOOL_TIMEOUT_S * 1000))),
    ]
    argv = java_argv(CONSOLE_CONSUMER, args, heap_mb=TOOLS_HEAP_MB, log4j=TOOLS_LOG4J)
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        process.kill()
        process.wait()


def parse_console_records(out: str, *, headers: bool = False) -> list[dict[str, Any]]:
    """`CreateTime:<ms>\\tPartition:<p>\\tOffset:<o>[\\t<headers>]\\t<key>\\t<value>` lines."""
    records = []
    for line in out.splitlines():
        stamp, partition, offset, *rest = line.split("\t", 5 if headers else 4)
        header_text = rest.pop(0) if headers else NO_HEADERS
        key, value = rest
        ts_type, _, ts = stamp.partition(":")
        record = {
            "partition": int(partition.removeprefix("Partition:")),
            "offset": int(offset.removeprefix("Offset:")),
            "key": None if key == "null" else key,
            "value": value,
            "timestamp_type": ts_type,
            "timestamp_ms": int(ts),
        }
        if headers:
            record["headers"] = (
                []
                if header_text == NO_HEADERS
                else [tuple(h.split(":", 1)) for h in header_text.split(",")]
            )
        records.append(record)
    return records


# kafka-consumer-groups


def list_groups(bootstrap: str) -> list[str]:
    out = run_tool(CONSUMER_GROUPS, ["--bootstrap-server", bootstrap, "--list"]).stdout
    return sorted(line.strip() for line in out.splitlines() if line.strip())


def describe_group(bootstrap: str, group: str) -> list[dict[str, Any]]:
    out = run_tool(
        CONSUMER_GROUPS, ["--bootstrap-server", bootstrap, "--describe", "--group", group]
    ).stdout
    return parse_group_description(out)


def parse_group_description(out: str) -> list[dict[str, Any]]:
    """The `--describe` table: one row per partition, '-' for an absent value."""
    rows = []
    header: list[str] | None = None
    for line in out.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == "GROUP":
            header = [c.lower().replace("-", "_") for c in cells]
            continue
        if header is not None and len(cells) == len(header):
            row: dict[str, Any] = dict(zip(header, cells, strict=True))
            for key in ("partition", "current_offset", "log_end_offset", "lag"):
                row[key] = None if row[key] == "-" else int(row[key])
            rows.append(row)
    return sorted(rows, key=lambda r: (r["topic"], r["partition"]))


def group_state(bootstrap: str, group: str) -> dict[str, str]:
    """`--describe --state`: the group's coordinator, assignor, state and member count."""
    out = run_tool(
        CONSUMER_GROUPS,
        ["--bootstrap-server", bootstrap, "--describe", "--group", group, "--state"],
    ).stdout
    return parse_group_state(out)


GROUP_STATE_LINE = re.compile(r"^(\S+)\s+(\S+)\s+\((\d+)\)\s+(\S+)\s+(\S+)\s+(\d+)\s*$")


def parse_group_state(out: str) -> dict[str, str]:
    for match in map(GROUP_STATE_LINE.match, out.splitlines()):
        if match and match.group(1) != "GROUP":
            group, coordinator, node, assignor, state, members = match.groups()
            return {
                "group": group,
                "coordinator": coordinator,
                "coordinator_id": node,
                "assignment_strategy": assignor,
                "state": state,
                "members": members,
            }
    raise ToolError(f"no group state in: {out[-500:]!r}")


def reset_offsets_to_earliest(bootstrap: str, group: str, topic: str) -> list[dict[str, Any]]:
    """`--reset-offsets --to-earliest --execute`: the NEW-OFFSET table it prints."""
    out = run_tool(
        CONSUMER_GROUPS,
        [
            *("--bootstrap-server", bootstrap, "--reset-offsets", "--to-earliest"),
            *("--group", group, "--topic", topic, "--execute"),
        ],
    ).stdout
    rows = []
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 4 and cells[0] != "GROUP":
            rows.append({"topic": cells[1], "partition": int(cells[2]), "offset": int(cells[3])})
    return rows


def delete_group(bootstrap: str, group: str) -> str:
    args = ["--bootstrap-server", bootstrap, "--delete", "--group", group]
    return run_tool(CONSUMER_GROUPS, args).stdout.strip()


# perf tools


@dataclass(frozen=True, slots=True)
class ProducerPerf:
    """The summary line of kafka-producer-perf-test."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


PRODUCER_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def parse_producer_perf(out: str) -> ProducerPerf:
    """The last summary line (the tool also prints interim ones every 5 s)."""
    matches = PRODUCER_SUMMARY.findall(out)
    if not matches:
        raise ToolError(f"no producer-perf summary in: {out[-500:]!r}")
    records, rate, mb, avg, mx, p50, p95, p99, p999 = matches[-1]
    return ProducerPerf(
        int(records), float(rate), float(mb), float(avg), float(mx),
        float(p50), float(p95), float(p99), float(p999),
    )  # fmt: skip


def producer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    record_bytes: int,
    acks: str,
    extra_props: Mapping[str, str] | None = None,
) -> ProducerPerf:
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records)),
        *("--record-size", str(record_bytes), "--throughput", "-1"),
        *("--command-property", f"acks={acks}"),
    ]
    for key, value in (extra_props or {}).items():
        args += ["--command-property", f"{key}={value}"]
    return parse_producer_perf(run_tool(PRODUCER_PERF, args, heap_mb=PERF_HEAP_MB).stdout)


def parse_consumer_perf(out: str) -> dict[str, float]:
    """The CSV header and one row: start.time, end.time, data.consumed.in.MB, MB.sec,
    data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, ..."""
    lines = [line for line in out.splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("start.time"):
            names = [n.strip() for n in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            row = dict(zip(names, values, strict=True))
            return {k: float(v) for k, v in row.items() if not k.endswith(".time")}
    raise ToolError(f"no consumer-perf table in: {out[-500:]!r}")


def consumer_perf(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    args = [
        *("--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records)),
        *("--timeout", str(CONSOLE_CONSUMER_IDLE_MS)),
    ]
    return parse_consumer_perf(run_tool(CONSUMER_PERF, args, heap_mb=PERF_HEAP_MB).stdout)


# kafka-dump-log (reads a Kafka broker's data directory, not a bootstrap address)

BATCH_LINE = re.compile(r"^baseOffset: \d+ .*\bcount: (\d+) .*\bcompresscodec: (\w+)")


def parse_batch_codecs(out: str) -> list[tuple[int, str]]:
    """(record count, codec) of every batch that kafka-dump-log printed."""
    return [(int(m.group(1)), m.group(2)) for m in map(BATCH_LINE.match, out.splitlines()) if m]


def stored_batch_codecs(log_dir: Path) -> list[tuple[int, str]]:
    """How the broker stored each batch of one partition directory (`<topic>-<p>`)."""
    files = sorted(str(f) for f in log_dir.glob("*.log"))
    if not files:
        raise ToolError(f"no segment files in {log_dir}")
    return parse_batch_codecs(run_tool(DUMP_LOG_SEGMENTS, ["--files", ",".join(files)]).stdout)


# kafka-acls

ACL_RESOURCE_LINE = re.compile(r"^Current ACLs for resource `(.+)`:\s*$")


def parse_acl_listing(out: str) -> dict[str, set[str]]:
    """`--list`: per resource pattern (`ResourcePattern(...)` text), its entries
    (`(principal=..., host=..., operation=..., permissionType=...)` text)."""
    listing: dict[str, set[str]] = {}
    entries: set[str] | None = None
    for line in out.splitlines():
        match = ACL_RESOURCE_LINE.match(line)
        if match:
            entries = listing.setdefault(match.group(1), set())
        elif line.strip().startswith("(principal=") and entries is not None:
            entries.add(line.strip())
    return listing
