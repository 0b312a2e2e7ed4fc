"""Static checks of deploy/: each file is checked by the tool that owns its format.

`promtool check config/rules` (Debian package `prometheus`), `systemd-analyze
verify` where systemd is installed, and, as no hadolint is packaged for this
machine, a Dockerfile check of the rules this image must keep (slim pinned base,
non-root user, exec-form entrypoint, HEALTHCHECK on /healthz, a data volume,
COPY sources that exist and are not excluded by the .dockerignore).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.config import VALID_KEYS, BrokerConfig, parse_properties

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
DATA_DIR = "/var/lib/tidelog"


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)"
)


@needs_promtool
def test_prometheus_config_passes_promtool() -> None:
    result = _run("promtool", "check", "config", str(DEPLOY / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


@needs_promtool
def test_alert_rules_pass_promtool() -> None:
    result = _run("promtool", "check", "rules", str(DEPLOY / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    # verify insists that ExecStart exists: point it at this checkout's `tidelog`.
    tidelog = ROOT / ".venv" / "bin" / "tidelog"
    if not tidelog.exists():
        tidelog = Path(shutil.which("tidelog") or "/usr/bin/env")
    text = (DEPLOY / "tidelog.service").read_text(encoding="utf-8")
    assert "/opt/tidelog/bin/tidelog serve" in text
    unit = tmp_path / "tidelog.service"
    unit.write_text(text.replace("/opt/tidelog/bin/tidelog", str(tidelog)), encoding="utf-8")
    result = _run("systemd-analyze", "verify", str(unit))
    # Unknown keys and bad values are only warnings: any output is a failure.
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def _unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    text = (DEPLOY / "tidelog.service").read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_systemd_unit_runs_unprivileged_and_stops_gracefully() -> None:
    s = _unit_settings()
    assert s["User"] == ["tidelog"]
    assert s["KillSignal"] == ["SIGTERM"]
    # Longer than the broker's drain (broker.server.SHUTDOWN_DRAIN_S) plus closing.
    from broker.server import SHUTDOWN_DRAIN_S

    assert int(s["TimeoutStopSec"][0]) > SHUTDOWN_DRAIN_S
    for key in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome"):
        assert key in s, key
    assert s["CapabilityBoundingSet"] == [""]
    assert f"--data-dir {DATA_DIR}" in s["ExecStart"][0]
    if s["Type"] == ["notify"]:
        assert s.get("NotifyAccess", ["main"]) == ["main"]


def test_server_properties_lists_every_key_and_its_defaults_are_valid() -> None:
    text = (DEPLOY / "server.properties").read_text(encoding="utf-8")
    active = parse_properties(text)
    assert active == {"log.dirs": DATA_DIR}
    # Every commented `#key=value` line, uncommented, is a key the broker knows.
    commented = parse_properties(
        "\n".join(m.group(1) for m in re.finditer(r"^#([a-z][\w.]*=.*)$", text, re.M))
    )
    assert set(commented) | set(active) == set(VALID_KEYS)
    # The documented defaults are the real ones: setting them all changes nothing.
    documented = BrokerConfig.from_props({**commented, **active})
    default = BrokerConfig.from_props({}, data_dir=DATA_DIR)
    for name in (
        "num_partitions",
        "max_connections",
        "socket_request_max_bytes",
        "log_cleaner_enable",
        "log_retention_check_interval_ms",
    ):
        assert getattr(documented, name) == getattr(default, name), name
    assert documented.log_config == default.log_config


# --- Dockerfile ---------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, args = line.partition(" ")
        out.append((word.upper(), args.strip()))
    return out


def _dockerignore_allows(path: str) -> bool:
    """Whether `path` survives Dockerfile.dockerignore (last matching pattern wins)."""
    allowed = True
    for raw in (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        regex = re.escape(pattern).replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        if re.fullmatch(regex, path.rstrip("/")) or path.startswith(pattern + "/"):
            allowed = negate
    return allowed


def test_dockerfile_follows_the_image_rules() -> None:
    steps = _instructions(DEPLOY / "Dockerfile")
    stages = [args for word, args in steps if word == "FROM"]
    assert stages and all(re.match(r"python:3\.1[1-9][\w.]*-slim\b", s) for s in stages), stages
    final = steps[max(i for i, (w, _) in enumerate(steps) if w == "FROM") :]
    words = [w for w, _ in final]
    user = [a for w, a in final if w == "USER"]
    assert user and user[-1] not in ("root", "0"), "the runtime stage must drop root"
    assert words.index("USER") < words.index("ENTRYPOINT")
    for word in ("ENTRYPOINT", "CMD"):
        (args,) = [a for w, a in final if w == word]
        assert isinstance(json.loads(args), list), f"{word} must be exec (JSON) form"
    (health,) = [a for w, a in final if w == "HEALTHCHECK"]
    assert "/healthz" in health and "CMD [" in health
    volumes = [json.loads(a) for w, a in final if w == "VOLUME"]
    assert [DATA_DIR] in volumes
    assert not [a for w, a in steps if w == "ADD"], "use COPY (ADD fetches URLs, unpacks tars)"
    for word, args in steps:
        if word == "RUN" and "apt-get install" in args:
            assert "--no-install-recommends" in args
        if word == "COPY" and not args.startswith("--from"):
            *sources, _dest = args.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: no such file in the repository"
                assert _dockerignore_allows(src), f"COPY {src}: excluded by the .dockerignore"


def test_dockerignore_keeps_the_context_small() -> None:
    assert not _dockerignore_allows(".venv")
    assert not _dockerignore_allows("tests/conftest.py")
    assert _dockerignore_allows("broker/server.py")


def test_compose_mounts_files_that_exist() -> None:
    text = (DEPLOY / "docker-compose.yml").read_text(encoding="utf-8")
    mounts = re.findall(r"- (\./[\w./-]+):", text)
    assert mounts
    for mount in mounts:
        assert (DEPLOY / mount).exists(), mount
    assert "dockerfile: deploy/Dockerfile" in text


def test_dashboard_json_is_generated_from_its_table() -> None:
    import runpy

    module = runpy.run_path(str(DEPLOY / "grafana" / "build_dashboard.py"))
    committed = (DEPLOY / "grafana" / "tidelog.json").read_text(encoding="utf-8")
    assert committed == module["render"](), "run python deploy/grafana/build_dashboard.py"
    ids = [p["id"] for p in json.loads(committed)["panels"]]
    assert len(ids) == len(set(ids))
