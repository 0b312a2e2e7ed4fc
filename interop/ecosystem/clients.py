"""Kafka clients in other languages, one round trip each: keyed records with headers
produced, read back through a consumer group, committed.

Every client prints the same JSON document (`{"records": [...], "committed": {...}}`),
so one normaliser and one differential comparison serve them all.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from interop.ecosystem import toolchains
from interop.jvm import TOOLS_HEAP_MB, TOOLS_LOG4J, java_binary

# Each client gives itself 60 s to read the records back; a cold JVM start on top.
ROUND_TRIP_TIMEOUT_S = 180.0
JAVA_MAIN = "dev.tidelog.interop.ClientRoundTrip"


def _java() -> list[str]:
    return [
        java_binary(), f"-Xmx{TOOLS_HEAP_MB}m", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp", toolchains.jvm_apps_classpath(), JAVA_MAIN,
    ]  # fmt: skip


# The client's name -> the command before `BOOTSTRAP TOPIC GROUP COUNT`.
CLIENTS: dict[str, Callable[[], list[str]]] = {
    "kafka-clients": _java,
    "kafkajs": toolchains.node_roundtrip,
    # Flexible versions only (Produce 9+, Fetch 15+ with topic ids, Metadata 12+): issue 36.
    "platformatic-kafka": lambda: toolchains.node_roundtrip("platformatic.js"),
    "franz-go": lambda: [*toolchains.go_roundtrip(), "franz"],
    "sarama": lambda: [*toolchains.go_roundtrip(), "sarama"],
}
# What each client's records carry in their `client` header (the programs write it).
CLIENT_HEADER = {
    "kafka-clients": "java",
    "kafkajs": "kafkajs",
    "platformatic-kafka": "platformatic-kafka",
    "franz-go": "franz-go",
    "sarama": "sarama",
}


def round_trip(client: str, bootstrap: str, topic: str, group: str, count: int) -> dict[str, Any]:
    """Run `client`'s round trip; its JSON document, or an error with the client's stderr."""
    argv = [*CLIENTS[client](), bootstrap, topic, group, str(count)]
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=ROUND_TRIP_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{client} round trip exited {result.returncode}: {result.stderr}")
    document: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return document


def normalise(document: dict[str, Any]) -> dict[str, Any]:
    """Records in (partition, offset) order, headers as lists: what two brokers must agree on."""
    records = sorted(
        (
            {**record, "headers": [list(pair) for pair in record["headers"]]}
            for record in document["records"]
        ),
        key=lambda record: (record["partition"], record["offset"]),
    )
    return {"records": records, "committed": dict(sorted(document["committed"].items()))}
