"""Fetch or build the suite's tools from the project's files, cached outside the repository.

Every build is keyed by a hash of its input files, so editing a pom, the lockfile, go.sum
or a source file rebuilds, and a second run reuses the cache. A `.complete` marker is
written last, so an interrupted build is redone rather than half-used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

INTEROP_DIR = Path(__file__).resolve().parent.parent
CONNECT_POM = INTEROP_DIR / "connect" / "pom.xml"
JVM_APPS_DIR = INTEROP_DIR / "jvm_apps"
FLINK_DIR = INTEROP_DIR / "flink"
NODE_DIR = INTEROP_DIR / "node"
GO_DIR = INTEROP_DIR / "go"
# Cold Maven / npm / Go module downloads on a slow mirror; a warm cache is seconds.
BUILD_TIMEOUT_S = 900
COMPLETE_MARKER = ".complete"


class ToolchainError(RuntimeError):
    """A build or fetch failed (no network, no toolchain, a broken project file)."""


def cache_root() -> Path:
    return Path.home() / ".cache" / "tidelog"


def _digest(files: Sequence[Path]) -> str:
    sha = hashlib.sha256()
    for path in sorted(files):
        sha.update(str(path.relative_to(INTEROP_DIR)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:12]


def _run(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        list(argv),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
        env=env,
    )
    if result.returncode != 0:
        raise ToolchainError(
            f"{' '.join(argv)} (in {cwd}) exited {result.returncode}: "
            f"{(result.stdout + result.stderr)[-2000:]}"
        )


def _cached(name: str, inputs: Sequence[Path], build: Callable[[Path], None]) -> Path:
    target = cache_root() / f"{name}-{_digest(inputs)}"
    if (target / COMPLETE_MARKER).exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    build(target)
    (target / COMPLETE_MARKER).write_text("ok\n")
    return target


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ToolchainError(f"`{name}` is not installed: {hint}")
    return found


def connect_classpath() -> str:
    """Connect 4.3.1's runtime, FileStream connectors and MirrorMaker 2 (connect/pom.xml)."""

    def build(target: Path) -> None:
        mvn = _tool("mvn", "apt-get install maven")
        _run(
            [mvn, "-q", "-B", "-f", str(CONNECT_POM), "dependency:copy-dependencies",
             f"-DoutputDirectory={target}"],
            cwd=INTEROP_DIR,
        )  # fmt: skip

    return str(_cached("connect", [CONNECT_POM], build) / "*")


def jvm_apps_classpath() -> str:
    """The compiled Streams app and kafka-clients round trip plus their jars (jvm_apps/)."""
    inputs = [JVM_APPS_DIR / "pom.xml", *sorted((JVM_APPS_DIR / "src").rglob("*.java"))]

    def build(target: Path) -> None:
        mvn = _tool("mvn", "apt-get install maven")
        _run(
            [mvn, "-q", "-B", "-f", str(JVM_APPS_DIR / "pom.xml"),
             f"-Dtidelog.build.dir={target / 'build'}", "compile",
             "dependency:copy-dependencies", f"-DoutputDirectory={target / 'lib'}"],
            cwd=INTEROP_DIR,
        )  # fmt: skip

    target = _cached("jvm-apps", inputs, build)
    return f"{target / 'build' / 'classes'}{os.pathsep}{target / 'lib' / '*'}"


def flink_classpath() -> str:
    """Flink 2.0's MiniCluster, its Kafka connector (with kafka-clients 3.9) and the
    EXACTLY_ONCE job (flink/); kept apart from jvm_apps' kafka-clients 4.4."""
    inputs = [FLINK_DIR / "pom.xml", *sorted((FLINK_DIR / "src").rglob("*.java"))]

    def build(target: Path) -> None:
        mvn = _tool("mvn", "apt-get install maven")
        _run(
            [mvn, "-q", "-B", "-f", str(FLINK_DIR / "pom.xml"),
             f"-Dtidelog.build.dir={target / 'build'}", "compile",
             "dependency:copy-dependencies", f"-DoutputDirectory={target / 'lib'}"],
            cwd=INTEROP_DIR,
        )  # fmt: skip

    target = _cached("flink", inputs, build)
    return f"{target / 'build' / 'classes'}{os.pathsep}{target / 'lib' / '*'}"


def node_roundtrip(script: str = "roundtrip.js") -> list[str]:
    """`node <script>` (roundtrip.js: kafkajs; platformatic.js: @platformatic/kafka) with the
    packages installed by `npm ci` from the committed lockfile."""
    inputs = [
        NODE_DIR / "package.json", NODE_DIR / "package-lock.json", *sorted(NODE_DIR.glob("*.js"))
    ]  # fmt: skip

    def build(target: Path) -> None:
        npm = _tool("npm", "apt-get install nodejs npm")
        for path in inputs:
            shutil.copy2(path, target / path.name)
        _run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=target)

    target = _cached("node-interop", inputs, build)
    return [_tool("node", "apt-get install nodejs"), str(target / script)]


def go_roundtrip() -> list[str]:
    """The franz-go / sarama binary, built with modules from the proxy checked by go.sum."""
    inputs = [GO_DIR / "go.mod", GO_DIR / "go.sum", *sorted(GO_DIR.glob("*.go"))]

    def build(target: Path) -> None:
        go = _tool("go", "install Go from https://go.dev/dl/")
        env = {**os.environ, "GOFLAGS": "-mod=readonly"}
        _run([go, "build", "-o", str(target / "roundtrip"), "."], cwd=GO_DIR, env=env)

    return [str(_cached("go-interop", inputs, build) / "roundtrip")]
