"""`tidelog groups` against the real broker: describe agrees with a brute-force count,
reset-offsets computes kafka-consumer-groups' targets, dry-runs by default and refuses
a group with members; list and delete."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from broker.cli.groups import parse_duration_ms
from protocol.batch import encode_batch, iter_records
from tests.conftest import BrokerProcess, start_broker
from tests.integration.promserver import scrape, scrape_text
from tests.integration.test_cli import cli
from tidelog.client import Client
from tidelog.consumer import Consumer, TopicPartition

pytestmark = pytest.mark.integration

MINUTE_MS = 60_000
# Records per partition; record i of a partition with n records is (n - i) * 10 min old.
COUNTS = {0: 10, 1: 4}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path_factory.mktemp("cli-groups") / "data",
        "group.initial.rebalance.delay.ms=0",
        "group.min.session.timeout.ms=500",
    )
    now_ms = int(time.time() * 1000)
    with Client(process.bootstrap) as admin:
        admin.create_topic("orders", 2)
        for partition, count in COUNTS.items():
            rows = [
                (None, b"%d" % i, None, now_ms - (count - i) * 10 * MINUTE_MS) for i in range(count)
            ]
            admin.produce("orders", partition, encode_batch(rows))
    yield process
    assert process.stop() == 0


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    with Client(broker.bootstrap) as client:
        answer = client.request("fetch_offsets", {"group": group})
    return {p["partition"]: p["offset"] for t in answer["topics"] for p in t["partitions"]}


def brute_force_lag(broker: BrokerProcess, partition: int, position: int) -> int:
    """Records at or after `position`, counted by reading the whole partition."""
    with Client(broker.bootstrap) as client:
        records = client.fetch("orders", partition, 0).records
    return sum(1 for r in iter_records(records) if r.offset >= position)


def member(broker: BrokerProcess, group: str) -> Consumer:
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        client_id="lagger",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=5_000,
        heartbeat_interval_ms=500,
    )
    consumer.subscribe(["orders"])
    consumer.poll(timeout_ms=500)
    return consumer


def test_describe_shows_members_offsets_and_lag(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    consumer = member(broker, "billing")
    try:
        consumer.commit({TopicPartition("orders", 0): 6, TopicPartition("orders", 1): 1})
        status, out, _ = cli(broker, capsys, "groups", "describe", "billing", "--format", "json")
        assert status == 0
        described = json.loads(out)
        assert described["state"] == "Stable" and len(described["members"]) == 1
        [m] = described["members"]
        assert (m["client_id"], m["client_host"]) == ("lagger", "127.0.0.1")
        rows = {r["partition"]: r for r in described["partitions"]}
        for partition, position in ((0, 6), (1, 1)):
            row = rows[partition]
            assert row["current_offset"] == position
            assert row["log_end_offset"] == COUNTS[partition]
            assert row["lag"] == brute_force_lag(broker, partition, position)
            assert row["consumer_id"] == m["member_id"]
        # The lag metric agrees with describe and with the brute-force count.
        metrics = scrape(broker.metrics_port)
        for partition, row in rows.items():
            labels = {"group": "billing", "topic": "orders", "partition": str(partition)}
            assert metrics.value("tidelog_consumer_group_lag", **labels) == row["lag"]
        assert metrics.value("tidelog_consumer_group_members", group="billing") == 1
        assert metrics.value("tidelog_consumer_group_state", group="billing", state="Stable") == 1
        assert metrics.value("tidelog_consumer_group_rebalances_total", group="billing") >= 1
        if shutil.which("promtool") is not None:
            checked = subprocess.run(
                ["promtool", "check", "metrics"],
                input=scrape_text(broker.metrics_port),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert checked.returncode == 0, checked.stdout + checked.stderr
        status, out, _ = cli(broker, capsys, "groups", "describe", "billing")
        assert "CURRENT-OFFSET" in out and "LAG" in out and "lagger" in out
        status, out, _ = cli(broker, capsys, "groups", "list")
        assert "billing" in out and "Stable" in out
        # A group with a member refuses a reset, dry run or not.
        status, _, err = cli(
            broker, capsys, "groups", "reset-offsets", "billing", "--all-topics", "--to-earliest"
        )
        assert status == 1 and "NON_EMPTY_GROUP" in err
        status, _, err = cli(broker, capsys, "groups", "delete", "billing")
        assert status == 1 and "NON_EMPTY_GROUP" in err
    finally:
        consumer.close()


def reset(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *how: str) -> dict[int, int]:
    status, out, err = cli(
        broker, capsys, "groups", "reset-offsets", "idle", "--topic", "orders", *how,
        "--format", "json",
    )  # fmt: skip
    assert status == 0, err
    return {r["partition"]: r["new_offset"] for r in json.loads(out)["partitions"]}


def test_reset_offsets_targets_dry_run_and_execute(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with Client(broker.bootstrap) as client:
        client.request(
            "commit_offsets",
            {
                "group": "idle",
                "topics": [
                    {
                        "topic": "orders",
                        "partitions": [
                            {"partition": 0, "offset": 5},
                            {"partition": 1, "offset": 2},
                        ],
                    }
                ],
            },
        )
    assert reset(broker, capsys, "--to-earliest") == {0: 0, 1: 0}
    assert committed(broker, "idle") == {0: 5, 1: 2}  # a dry run changes nothing
    assert reset(broker, capsys, "--to-latest") == {0: 10, 1: 4}
    assert reset(broker, capsys, "--to-offset", "7") == {0: 7, 1: 4}  # kept within the log
    assert reset(broker, capsys, "--shift-by", "-3") == {0: 2, 1: 0}
    assert reset(broker, capsys, "--by-duration", "PT65M") == {0: 4, 1: 0}  # 60 min old: in
    assert reset(broker, capsys, "--by-duration", "PT5M") == {0: 10, 1: 4}  # nothing that new
    with Client(broker.bootstrap) as client:
        [record] = [r for r in iter_records(client.fetch("orders", 0, 8).records) if r.offset == 8]
    # Both partitions have a record exactly 20 minutes old: p0 offset 8, p1 offset 2.
    assert reset(broker, capsys, "--to-datetime", str(record.timestamp)) == {0: 8, 1: 2}
    assert reset(broker, capsys, "--to-offset", "3", "--execute") == {0: 3, 1: 3}
    assert committed(broker, "idle") == {0: 3, 1: 3}
    status, out, _ = cli(
        broker, capsys, "groups", "reset-offsets", "idle", "--topic", "orders:1", "--shift-by", "1"
    )
    assert status == 0 and "dry run" in out and "NEW-OFFSET" in out
    status, out, _ = cli(broker, capsys, "groups", "delete", "idle")
    assert status == 0 and "deleted" in out
    assert committed(broker, "idle") == {}
    status, _, err = cli(broker, capsys, "groups", "describe", "idle")
    assert status == 1 and "GROUP_ID_NOT_FOUND" in err


@pytest.mark.parametrize(
    ("text", "ms"),
    [("PT1H", 3_600_000), ("P1DT2H", 93_600_000), ("PT1M30S", 90_000), ("PT0.5S", 500)],
    ids=["hour", "day-and-hours", "minutes-seconds", "fraction"],
)
def test_durations_as_kafka_writes_them(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms
