"""`format("tidelog")` as users run it: installed, from a directory of their own.

Each test runs a small PySpark job in a child process whose working directory is a fresh
temporary one and whose environment is built from nothing (no PYTHONPATH, nothing the
test session set), against the real broker on loopback, with one local Spark JVM:

1. the `make install` venv (the one running these tests), activated, no `register()`;
2. a wheel built from a copy of the repository, installed with its `spark` extra into a
   fresh venv by pip, the job started by that venv's `spark-submit`;
3. the workers' `python3` lacks Tidelog: the job fails with our message naming it.

The other Spark tests run inside the repository with PYTHONPATH set, where none of the
failures of issue 24 can happen.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `broker` (module) fixture.
pytest_plugins = ("tests.spark_connector.spark_support",)

ROOT = Path(__file__).resolve().parents[2]
# Rows the job writes and reads back: enough for two tasks, few enough to stay quick.
JOB_ROWS = 300
# Seconds for one job (a Spark JVM on a loaded 2-core machine takes 15-40 s to start).
JOB_TIMEOUT_S = 240
# Seconds for building the wheel and pip-installing it with PySpark (warm pip cache: 20-40 s).
INSTALL_TIMEOUT_S = 400
pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(JOB_TIMEOUT_S + 60),
]
# What the job prints before its JSON summary, among Spark's own output.
RESULT_MARK = "TIDELOG-JOB-RESULT "
# Not copied into the tree the wheel is built from: environments, caches, build output.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "*.egg-info",
    "data",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "spark-warehouse",
    "metastore_db",
)

JOB = """\
import importlib.util, json, os, sys
from pyspark.sql import SparkSession

bootstrap, topic, rows, register = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spark = SparkSession.builder.config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
result = {"driver_python": sys.executable, "driver_sys_path": sys.path, "cwd": os.getcwd()}
if register == "register":
    try:  # what the workers' own scan found, before the explicit registration
        spark.read.format("tidelog").load()
    except Exception as exc:
        result["unregistered_error"] = str(exc)
    from pyspark_tidelog import DefaultSource
    spark.dataSource.register(DefaultSource)
try:
    (
        spark.range(rows)
        .selectExpr("CAST(id AS STRING) AS key", "CAST(id * 7 AS STRING) AS value")
        .write.format("tidelog").mode("append")
        .option("bootstrap.servers", bootstrap).option("topic", topic).save()
    )
    df = (
        spark.read.format("tidelog")
        .option("bootstrap.servers", bootstrap).option("subscribe", topic).load()
    )
    result["values"] = sorted(
        int(r.v) for r in df.selectExpr("CAST(value AS STRING) AS v").collect()
    )

    def where_from(_):
        spec = importlib.util.find_spec("pyspark_tidelog")
        yield sys.executable, spec.origin if spec else None, sys.path

    worker = spark.sparkContext.parallelize([0], 1).mapPartitions(where_from).collect()[0]
    result["worker_python"], result["worker_origin"], result["worker_sys_path"] = worker
except Exception as exc:
    result["error"] = str(exc)
print(RESULT_MARK + json.dumps(result), flush=True)
spark.stop()
""".replace("RESULT_MARK", repr(RESULT_MARK))


def clean_env(venv: Path | None, tmp: Path) -> dict[str, str]:
    """A user's shell: PATH with `venv` activated first (if any), HOME, nothing else of ours."""
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p]
    path = [p for p in path if not (Path(p).parent / "pyvenv.cfg").exists()]  # no venv's bin
    env = {
        "HOME": os.environ.get("HOME", str(tmp)),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp),
        "PATH": os.pathsep.join(path),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return env


def run_job(
    cmd: list[str], cwd: Path, env: dict[str, str], broker: Broker, topic: str, register: str
) -> dict[str, Any]:
    """Run the job script in `cwd`; its JSON summary (the test fails on no summary)."""
    job = cwd / "job.py"
    job.write_text(JOB)
    with broker.client() as client:
        client.create_topic(topic, 2)
    args = [*cmd, str(job), broker.bootstrap, topic, str(JOB_ROWS), register]
    proc = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    raise AssertionError(
        f"job printed no result (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
    )


def assert_round_trip(result: dict[str, Any]) -> None:
    assert "error" not in result, result.get("error")
    assert result["values"] == [i * 7 for i in range(JOB_ROWS)]


def venv_of(python: str) -> Path:
    return Path(python).parent.parent


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    """The user's own directory: nothing of the repository in it."""
    path = tmp_path / "job"
    path.mkdir()
    return path


def test_make_install_venv_finds_the_format_from_any_directory(
    broker: Broker, job_dir: Path, tmp_path: Path
) -> None:
    venv = venv_of(sys.executable)
    assert (venv / "pyvenv.cfg").exists(), "the tests must run in the `make install` venv"
    result = run_job(
        ["python"], job_dir, clean_env(venv, tmp_path), broker, "install-editable", "no"
    )
    assert_round_trip(result)
    assert result["cwd"] == str(job_dir)
    assert venv_of(result["worker_python"]) == venv
    # The workers found the module of this checkout (the editable install) by the scan.
    assert result["worker_origin"] == str(ROOT / "pyspark_tidelog" / "__init__.py")


@pytest.fixture
def wheel_venv(tmp_path: Path) -> Iterator[Path]:
    """A fresh venv with the wheel of a copy of this repository and its `spark` extra."""
    src, dist, venv = tmp_path / "src", tmp_path / "dist", tmp_path / "wheel-venv"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    pip_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(*cmd: str) -> None:
        subprocess.run(cmd, env=pip_env, cwd=tmp_path, check=True, timeout=INSTALL_TIMEOUT_S)

    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(dist))
    (wheel,) = dist.glob("tidelog-*.whl")
    run(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    # --no-compile: no .pyc for PySpark's thousands of modules (halves the install time).
    pip = [python, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check"]
    run(*pip, f"{wheel}[spark]")
    yield venv
    shutil.rmtree(venv, ignore_errors=True)  # ~900 MB, mostly PySpark


@pytest.mark.timeout(INSTALL_TIMEOUT_S + JOB_TIMEOUT_S)
def test_wheel_in_a_fresh_venv_runs_under_spark_submit(
    broker: Broker, wheel_venv: Path, job_dir: Path, tmp_path: Path
) -> None:
    spark_submit = [str(wheel_venv / "bin" / "spark-submit"), "--master", "local[2]"]
    env = clean_env(wheel_venv, tmp_path)
    result = run_job(spark_submit, job_dir, env, broker, "install-wheel", "no")
    assert_round_trip(result)
    assert venv_of(result["driver_python"]) == wheel_venv
    assert venv_of(result["worker_python"]) == wheel_venv
    site = Path(result["worker_origin"]).parent.parent
    assert site.name == "site-packages" and site.is_relative_to(wheel_venv)
    for path in (*result["driver_sys_path"], *result["worker_sys_path"]):
        assert not Path(path or ".").resolve().is_relative_to(ROOT), path


def test_workers_without_the_connector_fail_with_their_interpreter_named(
    broker: Broker, job_dir: Path, tmp_path: Path
) -> None:
    """The driver runs the venv's Python without activating it, so the workers start as
    `python3` from PATH, and that Python has PySpark (Spark ships it) but no Tidelog."""
    bare = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = clean_env(None, tmp_path)
    env["PATH"] = os.pathsep.join([str(bare / "bin"), env["PATH"]])
    result = run_job([sys.executable], job_dir, env, broker, "install-missing", "register")
    assert "[DATA_SOURCE_NOT_FOUND] Failed to find the data source: tidelog" in result.get(
        "unregistered_error", ""
    )
    message = result.get("error", "")
    assert f"Spark's Python worker {bare / 'bin' / 'python3'} cannot import" in message
    assert "No module named 'spark_connector'" in message
    assert f"The Python that registered the format, {sys.executable}, has it." in message
    assert "PYSPARK_PYTHON" in message and "activate the virtualenv" in message
