"""The daemon's life: startup config, restarts, shutdowns, metrics and disk errors."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, BrokerFactory, serve_command
from tests.integration.wire import WireClient, batch, fetch_body, values_of, wait_until

pytestmark = pytest.mark.integration

CLEAN_MARKER = ".tidelog_cleanshutdown"


def _http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _serve_once(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*serve_command(), "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "named", "suggested"),
    [
        (("--set", "log.retention.msec=5"), "log.retention.msec", "log.retention.ms"),
        (("--set", "num.partitions=zero"), "num.partitions", None),
        (("--set", "noequals"), "noequals", None),
        (("--listen", "nowhere"), "--listen", None),
    ],
    ids=["unknown-key", "bad-value", "bad-set", "bad-listen"],
)
def test_bad_config_exits_2_naming_the_key(
    tmp_path: Path, args: tuple[str, ...], named: str, suggested: str | None
) -> None:
    done = _serve_once(tmp_path, *args)
    assert done.returncode == 2, done
    assert named in done.stderr
    if suggested:
        assert f"did you mean {suggested!r}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "d").exists()  # refused before touching the disk


def test_config_file_sets_topic_defaults(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text("# test\nlog.segment.bytes=1048576\nnum.partitions=2\n")
    broker = broker_factory(config_file=conf)
    with WireClient(broker.address) as c:
        c.produce("auto-made", batch(b"v"))  # auto.create.topics.enable defaults to true
        meta = c.ok("metadata", {"topics": ["auto-made"]})["topics"][0]
        assert len(meta["partitions"]) == 2
        configs = c.ok("describe_configs", {"topic": "auto-made"})["configs"]
        assert configs["segment.bytes"] == {"value": 1048576, "source": "broker"}


def test_startup_logs_bound_addresses_and_health_endpoints(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    ready = broker.events("broker_ready")[0]
    assert ready["listen"] == f"127.0.0.1:{broker.port}"
    assert ready["metrics_listen"] == f"127.0.0.1:{broker.metrics_port}"
    assert ready["level"] == "info" and "timestamp" in ready
    assert _http_get(broker.metrics_port, "/healthz")[0] == 200
    status, body = _http_get(broker.metrics_port, "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True
    with WireClient(broker.address) as c:
        c.create_topic("metered")
        c.produce("metered", batch(b"a", b"b"))
        c.fetch("metered", 0)
        assert c.fetch("metered", 99)["error"] == "OFFSET_OUT_OF_RANGE"
        c.call("describe_configs", {"topic": "missing"})
    status, text = _http_get(broker.metrics_port, "/metrics")
    assert status == 200
    metrics = text.decode()
    assert 'tidelog_requests_total{api="produce",error="none"} 1.0' in metrics
    assert (
        'tidelog_requests_total{api="describe_configs",error="UNKNOWN_TOPIC_OR_PARTITION"} 1.0'
        in (metrics)
    )
    assert 'tidelog_requests_total{api="fetch",error="OFFSET_OUT_OF_RANGE"} 1.0' in metrics
    assert 'tidelog_requests_total{api="fetch",error="none"} 1.0' in metrics
    assert 'tidelog_records_in_total{topic="metered"} 2.0' in metrics
    assert 'tidelog_log_end_offset{partition="0",topic="metered"} 2.0' in metrics
    assert "tidelog_connections 0.0" in metrics or "tidelog_connections 1.0" in metrics


def test_graceful_shutdown_then_clean_restart(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data = tmp_path / "restart"
    broker = broker_factory(data_dir=data)
    with WireClient(broker.address) as c:
        c.create_topic("keep", 2, retention_ms=123456)
        c.produce("keep", batch(b"one", b"two"), acks=1)
        c.produce("keep", batch(b"three"), partition=1, acks=-1)
        c.ok("alter_configs", {"topic": "keep", "set": {"max.message.bytes": 800}})
    assert broker.stop(signal.SIGTERM) == 0
    assert (data / CLEAN_MARKER).exists()
    assert (data / "recovery-point-offset-checkpoint").exists()
    events = [e["event"] for e in broker.events()]
    assert events.index("shutdown_started") < events.index("shutdown_complete")

    again = broker_factory(data_dir=data)
    with WireClient(again.address) as c:
        assert values_of(c.fetch("keep", 0)["records"]) == [b"one", b"two"]
        assert values_of(c.fetch("keep", 0, partition=1)["records"]) == [b"three"]
        configs = c.ok("describe_configs", {"topic": "keep"})["configs"]
        assert configs["retention.ms"] == {"value": 123456, "source": "topic"}
        assert configs["max.message.bytes"] == {"value": 800, "source": "topic"}
        too_big = c.call(
            "produce",
            {"acks": 1, "timeout_ms": 1000, "topics": [{"topic": "keep", "partitions": [
                {"partition": 0, "records": batch(b"x" * 1000)}]}]},
        )["body"]["topics"][0]["partitions"][0]  # fmt: skip
        assert too_big["error"] == "MESSAGE_TOO_LARGE"
    assert again.stop(signal.SIGINT) == 0


def test_sigterm_answers_in_flight_long_poll(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    with WireClient(broker.address) as c:
        c.create_topic("draining")
        request_id = c.send("fetch", fetch_body("draining", 0, max_wait_ms=600_000, min_bytes=1))
        # Signal only once the broker holds the fetch (parked in its long poll).
        wait_until(
            lambda: (
                b"tidelog_inflight_requests 1.0" in _http_get(broker.metrics_port, "/metrics")[1]
            )
        )
        broker.send_signal(signal.SIGTERM)
        response = c.recv()
        assert response is not None and response["id"] == request_id
        assert response["error"] is None
        assert c.is_closed_by_peer()
    assert broker.proc.wait(timeout=30) == 0


def test_second_signal_exits_at_once(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    with WireClient(broker.address) as c:
        c.create_topic("big")
        chunk = batch(*[b"x" * 1000] * 900)
        for _ in range(10):
            c.produce("big", chunk)
        # Pipeline large fetches and never read them: the broker's drain blocks on send.
        for _ in range(40):
            c.send("fetch", fetch_body("big", 0, max_bytes=50 << 20))
        broker.send_signal(signal.SIGTERM)
        broker.wait_for_event("shutdown_started")
        assert broker.proc.poll() is None  # still draining
        broker.send_signal(signal.SIGTERM)
        assert broker.proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not (broker.data_dir / CLEAN_MARKER).exists()


def test_acked_data_survives_kill_9(tmp_path: Path, broker_factory: BrokerFactory) -> None:
    data = tmp_path / "crash"
    broker = broker_factory(data_dir=data)
    with WireClient(broker.address) as c:
        c.create_topic("durable")
        for i in range(20):
            c.produce("durable", batch(b"%d" % i), acks=1)
    broker.kill()
    assert not (data / CLEAN_MARKER).exists()
    again = broker_factory(data_dir=data)
    with WireClient(again.address) as c:
        fetched = c.fetch("durable", 0)
        assert values_of(fetched["records"]) == [b"%d" % i for i in range(20)]


def test_disk_error_is_storage_error_and_broker_keeps_serving(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(env={"TIDELOG_FAILPOINTS": "segment.append.before_write=enospc@2"})
    with WireClient(broker.address) as c:
        c.create_topic("full")
        c.create_topic("fine")
        assert c.produce("full", batch(b"first"))["error"] is None
        failed = c.produce("full", batch(b"second"))
        assert failed["error"] == "STORAGE_ERROR"
        assert failed["message"]
        assert c.produce("fine", batch(b"other"))["error"] is None
        assert values_of(c.fetch("full", 0)["records"]) == [b"first"]
        assert c.ok("api_versions", {})["server"] == "tidelog"


def test_second_broker_on_same_data_dir_fails_cleanly(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data = tmp_path / "locked"
    broker_factory(data_dir=data)
    done = subprocess.run(
        [*serve_command(), "--data-dir", str(data), "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--log-format", "json"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1
    failure = [json.loads(line) for line in done.stdout.splitlines() if "startup_failed" in line]
    assert failure and failure[0]["error"] == "STORAGE_ERROR"
    assert "Traceback" not in done.stderr


def test_bad_key_in_config_file_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text("log.retention.hours=24\nlog.segment.byte=1048576\n")
    done = _serve_once(tmp_path, "--config", str(conf))
    assert done.returncode == 2
    assert "'log.segment.byte'" in done.stderr and "'log.segment.bytes'" in done.stderr
    missing = _serve_once(tmp_path, "--config", str(tmp_path / "absent.properties"))
    assert missing.returncode == 2 and "absent.properties" in missing.stderr
