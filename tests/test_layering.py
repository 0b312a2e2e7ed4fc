"""Enforces DESIGN.md's import layering by walking every module's imports.

protocol <- storage <- retention/compaction <- broker; spark_connector uses only
protocol; storage never imports trio, prometheus_client or broker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = {
    "protocol",
    "storage",
    "retention",
    "compaction",
    "broker",
    "spark_connector",
    "pyspark_tidelog",
}

# package -> project packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "storage": {"protocol"},
    "retention": {"protocol", "storage"},
    "compaction": {"protocol", "storage", "retention"},
    "broker": {"protocol", "storage", "retention", "compaction"},
    "spark_connector": {"protocol"},
    "pyspark_tidelog": {"spark_connector", "protocol"},
}

# package -> third-party top-level modules it must never import
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "protocol": {"prometheus_client", "structlog"},
    "storage": {"trio", "prometheus_client"},
    "retention": {"trio", "prometheus_client"},
    "compaction": {"trio", "prometheus_client"},
    "spark_connector": {"trio", "prometheus_client"},
}

# Only this module may import prometheus_client (components expose statistics()).
PROMETHEUS_OWNER = "broker/metrics.py"


def imported_top_levels(source: str) -> set[str]:
    """Top-level module names imported anywhere in `source`, lazily or not."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def layering_violations(root: Path) -> list[str]:
    problems: list[str] = []
    for package in sorted(ALLOWED):
        pkg_dir = root / package
        if not pkg_dir.is_dir():
            continue
        for path in sorted(pkg_dir.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            imports = imported_top_levels(path.read_text(encoding="utf-8"))
            for name in sorted(imports & PROJECT_PACKAGES - {package} - ALLOWED[package]):
                problems.append(f"{rel} imports {name}")
            for name in sorted(imports & FORBIDDEN_THIRD_PARTY.get(package, set())):
                problems.append(f"{rel} imports {name}")
            if "prometheus_client" in imports and rel != PROMETHEUS_OWNER:
                problems.append(f"{rel} imports prometheus_client (only {PROMETHEUS_OWNER} may)")
    return problems


def test_project_respects_layering() -> None:
    assert layering_violations(ROOT) == []


@pytest.mark.parametrize(
    ("package", "line", "culprit"),
    [
        ("storage", "import trio", "trio"),
        ("storage", "from broker import cli", "broker"),
        ("storage", "import prometheus_client", "prometheus_client"),
        ("protocol", "from storage import log", "storage"),
        ("spark_connector", "import broker.cli", "broker"),
        ("retention", "from compaction import cleaner", "compaction"),
    ],
)
def test_checker_catches_a_forbidden_import(
    tmp_path: Path, package: str, line: str, culprit: str
) -> None:
    (tmp_path / package).mkdir()
    (tmp_path / package / "bad.py").write_text(f"{line}\n", encoding="utf-8")
    violations = layering_violations(tmp_path)
    assert violations == [f"{package}/bad.py imports {culprit}"] or any(
        culprit in v for v in violations
    )
    assert violations
