"""The `tidelog` CLI end to end against the real `tidelog serve` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli.main import main
from protocol.batch import encode_batch
from tests.conftest import ROOT, BrokerProcess, start_broker
from tidelog.client import Client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; every test uses its own topic names."""
    process = start_broker(tmp_path_factory.mktemp("cli") / "data")
    yield process
    assert process.stop() == 0


def tidelog(
    broker: BrokerProcess, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI as users do: a separate process."""
    env = dict(os.environ, TIDELOG_BOOTSTRAP_SERVER=broker.bootstrap)
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def cli(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """Run the CLI in this process (faster); returns (status, stdout, stderr)."""
    status = main([*args, "--bootstrap-server", broker.bootstrap])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_tour_create_produce_consume_offsets(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = cli(broker, capsys, "topics", "create", "events", "-p", "2")
    assert (status, out) == (0, "created topic events with 2 partitions\n")

    produced = tidelog(
        broker, "produce", "events", "-p", "0", "--key-separator", ":",
        stdin=b"k1:hello\nk2:world\r\nk3:\xff\xfebinary\n",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert produced.stdout == b"events-0: 3 records at offsets 0..2\n"

    consumed = tidelog(broker, "consume", "events", "-p", "0")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout == b"hello\nworld\n\xff\xfebinary\n"

    as_json = tidelog(broker, "consume", "events", "--format", "json", "-n", "3")
    records = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["offset"], r["key"]) for r in records] == [(0, "k1"), (1, "k2"), (2, "k3")]
    assert records[0]["value"] == "hello" and records[0]["timestamp_type"] == "CreateTime"
    assert "value" not in records[2] and records[2]["value_base64"] == "//5iaW5hcnk="

    status, out, _ = cli(broker, capsys, "offsets", "events")
    assert out == "events:0:3\nevents:1:0\n"
    status, out, _ = cli(broker, capsys, "offsets", "events", "--time", "earliest", "-p", "0")
    assert out == "events:0:0\n"
    status, out, _ = cli(broker, capsys, "offsets", "events", "--time", "2999-01-01")
    assert out == "events:0:none\nevents:1:none\n"


def test_consume_offset_specs_and_count(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "nums")
    lines = b"".join(b"%d\n" % i for i in range(100))
    produced = tidelog(broker, "produce", "nums", "--compression", "lz4", stdin=lines)
    assert produced.returncode == 0

    def values(*args: str) -> list[int]:
        result = tidelog(broker, "consume", "nums", *args)
        assert result.returncode == 0, result.stderr
        return [int(v) for v in result.stdout.split()]

    assert values() == list(range(100))
    assert values("-o", "95") == [95, 96, 97, 98, 99]
    assert values("-o", "-2") == [98, 99]
    assert values("-o", "+97") == [97, 98, 99]
    assert values("-o", "10", "-n", "3") == [10, 11, 12]
    assert values("-o", "end") == []
    assert values("-o", "@0", "-n", "1") == [0]


def test_consume_group_resumes_where_it_stopped(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "grouped", "-p", "2")
    lines = b"".join(b"k%d:%d\n" % (i, i) for i in range(40))
    assert (
        tidelog(broker, "produce", "grouped", "--key-separator", ":", stdin=lines).returncode == 0
    )

    def values(*args: str) -> list[int]:
        result = tidelog(broker, "consume", "grouped", "--group", "g1", *args)
        assert result.returncode == 0, result.stderr
        return [int(v) for v in result.stdout.split()]

    first = values("-n", "7")
    rest = values()
    # -n stops mid-poll: the unprinted records of that poll must come next time.
    assert len(first) == 7
    assert sorted(first + rest) == list(range(40))
    assert values() == []
    # An explicit --offset overrides the committed position; another group starts fresh.
    assert len(values("-o", "start")) == 40
    other = tidelog(broker, "consume", "grouped", "--group", "g2")
    assert sorted(int(v) for v in other.stdout.split()) == list(range(40))


def test_produce_from_file_and_tombstones(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cli(broker, capsys, "topics", "create", "users", "-c", "cleanup.policy=compact")
    source = tmp_path / "users.txt"
    source.write_bytes(b"alice:1\nbob:2\nalice:\n")
    status, out, err = cli(
        broker, capsys, "produce", "users", "-f", str(source), "-k", ":", "--tombstone",
        "-H", "origin=test",
    )  # fmt: skip
    assert status == 0, err
    assert out == "users-0: 3 records at offsets 0..2\n"
    status, out, _ = cli(broker, capsys, "consume", "users", "--format", "json")
    records = [json.loads(line) for line in out.splitlines()]
    pairs = [(r["key"], r["value"]) for r in records]
    assert pairs == [("alice", "1"), ("bob", "2"), ("alice", None)]
    assert records[0]["headers"] == [{"key": "origin", "value": "test"}]


def test_produce_errors_are_one_line(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tidelog(broker, "produce", "missing", stdin=b"x\n")
    assert result.returncode == 1
    assert result.stderr.startswith(b"error: UNKNOWN_TOPIC_OR_PARTITION:")
    assert b"Traceback" not in result.stderr
    cli(broker, capsys, "topics", "create", "errs")
    result = tidelog(broker, "produce", "errs", "-k", ":", stdin=b"no separator here\n")
    assert result.returncode == 1
    assert result.stderr == (
        b"error: BAD_INPUT: line 1 has no key separator ':' (fix the input and try again)\n"
    )


def test_topic_admin_commands(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, _ = cli(broker, capsys, "topics", "create", "a", "-c", "retention.ms=1000")
    assert status == 0
    status, _, err = cli(broker, capsys, "topics", "create", "a")
    assert status == 1 and err.startswith("error: TOPIC_ALREADY_EXISTS:")
    assert err.rstrip().endswith("(pick another name, or pass --if-not-exists)")
    assert cli(broker, capsys, "topics", "create", "a", "--if-not-exists")[0] == 0

    status, _, err = cli(broker, capsys, "topics", "create", "../escape")
    assert status == 1 and err.startswith("error: INVALID_TOPIC_EXCEPTION:")
    assert not (broker.data_dir.parent / "escape-0").exists()
    status, _, err = cli(broker, capsys, "topics", "create", "b", "-c", "retention.mss=1")
    assert status == 1 and err.startswith("error: INVALID_CONFIG:")

    status, out, _ = cli(broker, capsys, "topics", "list")
    assert "a" in out.splitlines()
    status, out, _ = cli(broker, capsys, "topics", "describe", "a")
    assert out.startswith("Topic: a  Partitions: 1  Overrides: retention.ms=1000\n")
    assert any(line.split() == ["retention.ms", "1000", "topic"] for line in out.splitlines())

    status, out, _ = cli(
        broker, capsys, "topics", "alter-config", "a", "--set", "retention.ms=5000",
        "--set", "segment.bytes=1048576",
    )  # fmt: skip
    assert status == 0
    status, out, _ = cli(broker, capsys, "topics", "describe", "a", "--format", "json")
    configs = json.loads(out)["configs"]
    assert configs["retention.ms"] == {"value": configs["retention.ms"]["value"], "source": "topic"}
    assert str(configs["retention.ms"]["value"]) == "5000"
    status, _, _ = cli(broker, capsys, "topics", "alter-config", "a", "--delete", "retention.ms")
    status, out, _ = cli(broker, capsys, "topics", "describe", "a", "--format", "json")
    assert json.loads(out)["configs"]["retention.ms"]["source"] != "topic"

    assert cli(broker, capsys, "topics", "delete", "a")[1] == "deleted topic a\n"
    status, _, err = cli(broker, capsys, "topics", "delete", "a")
    assert status == 1 and err.startswith("error: UNKNOWN_TOPIC_OR_PARTITION:")
    assert cli(broker, capsys, "topics", "delete", "a", "--if-exists")[0] == 0


def test_delete_records_and_log_dirs(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "d", "-p", "2")
    lines = b"".join(b"%d\n" % i for i in range(10))
    tidelog(broker, "produce", "d", "-p", "1", stdin=lines)
    status, out, _ = cli(broker, capsys, "delete-records", "d", "-p", "1", "--offset", "4")
    assert (status, out) == (0, "d-1: log start offset is now 4\n")
    status, out, _ = cli(broker, capsys, "consume", "d", "-p", "1")
    assert out.split() == [str(i) for i in range(4, 10)]
    status, _, err = cli(broker, capsys, "delete-records", "d", "-p", "1", "--offset", "99")
    assert status == 1 and err.startswith("error: OFFSET_OUT_OF_RANGE:")

    status, out, _ = cli(broker, capsys, "log-dirs", "--format", "json")
    parts = {(p["topic"], p["partition"]): p for p in json.loads(out)["partitions"]}
    assert parts[("d", 1)]["log_start_offset"] == 4 and parts[("d", 1)]["size"] > 0
    assert parts[("d", 0)]["high_watermark"] == 0
    status, out, _ = cli(broker, capsys, "log-dirs")
    assert out.splitlines()[0].split() == [
        "PARTITION", "SIZE-BYTES", "SEGMENTS", "LOG-START", "HIGH-WATERMARK",
    ]  # fmt: skip


def test_dump_log_reads_the_brokers_segment(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "seg")
    tidelog(broker, "produce", "seg", stdin=b"a\nb\nc\n")
    log = broker.data_dir / "seg-0" / "00000000000000000000.log"
    status, out, err = cli(broker, capsys, "dump-log", "-d", str(log))
    assert status == 0, err
    assert "isValid: true" in out
    assert [line.split("payload: ")[1] for line in out.splitlines() if "payload" in line] == [
        "a",
        "b",
        "c",
    ]


def test_consume_into_a_closed_pipe_exits_quietly(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "many")
    tidelog(broker, "produce", "many", stdin=b"x" * 100 + b"\n" * 1 + b"y\n" * 50_000)
    env = dict(os.environ, TIDELOG_BOOTSTRAP_SERVER=broker.bootstrap)
    pipeline = subprocess.run(
        f"{sys.executable} -m broker consume many | head -n 2",
        shell=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert pipeline.stdout.splitlines() == [b"x" * 100, b"y"]
    assert b"Traceback" not in pipeline.stderr and b"error" not in pipeline.stderr


def test_consume_follow_prints_new_records_as_they_arrive(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "live")
    env = dict(os.environ, TIDELOG_BOOTSTRAP_SERVER=broker.bootstrap)
    command = ["consume", "live", "--offset", "end", "--follow", "-n", "2"]
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    produced = 0
    try:
        # It starts at the end it sees when it starts, so keep producing until -n 2 ends it.
        with Client(broker.bootstrap) as client:
            while follower.poll() is None and produced < 300:
                client.produce("live", 0, encode_batch([(None, b"%d" % produced, None, 1)]))
                produced += 1
                time.sleep(0.1)
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode == 0, err
    first, second = (int(v) for v in out.split())
    assert second == first + 1 and second < produced


def test_ctrl_c_stops_a_follower_quietly(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(broker, capsys, "topics", "create", "stopme")
    with Client(broker.bootstrap) as client:
        client.produce("stopme", 0, encode_batch([(None, b"first", None, 1)]))
    env = dict(os.environ, TIDELOG_BOOTSTRAP_SERVER=broker.bootstrap, PYTHONUNBUFFERED="1")
    # Ctrl-C at a terminal: SIGINT at its default in the follower, even when this test
    # runs under a shell that started it in the background (which ignores SIGINT, and
    # an ignored signal stays ignored across exec).
    follower = subprocess.Popen(
        [sys.executable, "-m", "broker", "consume", "stopme", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    with follower:  # closes the pipes whatever happens
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline() == b"first\n"  # it is up and waiting now
            follower.send_signal(signal.SIGINT)
            _, err = follower.communicate(timeout=30)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    assert follower.returncode == 130
    assert err == b""
