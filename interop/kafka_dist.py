"""Apache Kafka's jars, fetched with Maven from `interop/kafka/pom.xml` and cached.

The jars are never committed: `kafka_classpath()` runs `mvn dependency:copy-dependencies`
once into a cache directory outside the repository (`~/.cache/tidelog/kafka-<version>`,
or `$TIDELOG_KAFKA_LIBS`) and reuses it afterwards. The Kafka version lives only in the
pom, so a bump is a one-line change there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

POM_PATH = Path(__file__).resolve().parent / "kafka" / "pom.xml"
# Overrides the cache directory (e.g. to share one copy between worktrees or CI steps).
LIBS_ENV = "TIDELOG_KAFKA_LIBS"
# Marks a complete download, so an interrupted `mvn` run is redone rather than half-used.
COMPLETE_MARKER = ".complete"
# A cold fetch of ~90 jars from Maven Central took ~60 s here; allow for a slow mirror.
MVN_TIMEOUT_S = 900
# The jar whose presence says the download is really Kafka's broker.
BROKER_JAR_PATTERN = "kafka_2.13-{version}.jar"


class KafkaDistError(RuntimeError):
    """Kafka's jars could not be located or fetched (no Maven, no network, bad pom)."""


def kafka_version() -> str:
    """The `kafka.version` property of the pom: the one place the version is written."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM_PATH.read_text())
    if match is None:
        raise KafkaDistError(f"no <kafka.version> in {POM_PATH}")
    return match.group(1).strip()


def libs_dir() -> Path:
    """Where the jars are (or will be) cached."""
    override = os.environ.get(LIBS_ENV)
    if override:
        return Path(override)
    return Path.home() / ".cache" / "tidelog" / f"kafka-{kafka_version()}"


def ensure_kafka_jars() -> Path:
    """The directory of Kafka's jars, running Maven first if they are not cached yet."""
    target = libs_dir()
    if (target / COMPLETE_MARKER).exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaDistError("Maven (`mvn`) is not installed: apt-get install maven")
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(POM_PATH),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={target}",
        ],
        capture_output=True,
        text=True,
        timeout=MVN_TIMEOUT_S,
        check=False,
    )
    broker_jar = target / BROKER_JAR_PATTERN.format(version=kafka_version())
    if result.returncode != 0 or not broker_jar.exists():
        raise KafkaDistError(
            f"mvn copy-dependencies of {POM_PATH} into {target} failed "
            f"(exit {result.returncode}): {(result.stdout + result.stderr)[-2000:]}"
        )
    (target / COMPLETE_MARKER).write_text(kafka_version() + "\n")
    return target


def kafka_classpath() -> str:
    """A `java -cp` argument naming every cached jar (the JVM expands `dir/*`)."""
    return str(ensure_kafka_jars() / "*")
