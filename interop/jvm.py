"""How every Kafka JVM here is launched: `java -cp <cached jars> <main class> args`."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from interop.kafka_dist import kafka_classpath

KAFKA_CONF_DIR = Path(__file__).resolve().parent / "kafka"
BROKER_LOG4J = KAFKA_CONF_DIR / "log4j2-broker.properties"
TOOLS_LOG4J = KAFKA_CONF_DIR / "log4j2-tools.properties"
# The brief's budget for the broker's heap: the machine is shared by several sessions.
BROKER_HEAP_MB = 512
# The tools are short-lived clients; Kafka's own scripts give them 256 MB.
TOOLS_HEAP_MB = 256


def java_binary() -> str:
    """The `java` on PATH (Kafka 4.x brokers and tools need Java 17+)."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no `java` on PATH: Kafka 4.x needs a Java 17+ runtime")
    return java


def java_argv(main_class: str, args: Sequence[str], *, heap_mb: int, log4j: Path) -> list[str]:
    """The command line for one of Kafka's main classes with the cached jars."""
    return [
        java_binary(),
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        kafka_classpath(),
        main_class,
        *args,
    ]
