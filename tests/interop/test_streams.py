"""Kafka Streams 4.4 at-least-once on Tidelog, with Apache Kafka as the oracle (issue 37).

The application (interop/jvm_apps, `StreamsApp`) re-keys orders by customer (a repartition
topic), aggregates each customer's order ids (a store with a compacted changelog) and joins
a GlobalKTable of names. It is killed with SIGKILL halfway and started again on its state
directory; the final output per key must be the complete answer, as on Apache Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from interop.ecosystem import kafka_io
from interop.ecosystem.brokers import restartable
from interop.ecosystem.streams import StreamsApp

pytestmark = pytest.mark.interop

CUSTOMERS = {f"c{i}": f"name-{i}" for i in range(4)}
ORDERS = 24
OUTPUT_TIMEOUT_S = 90.0


def _orders(
    first: int, count: int
) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]], None]]:
    return [
        (i % 2, f"o{i:02d}".encode(), f"c{i % len(CUSTOMERS)}".encode(), [], None)
        for i in range(first, first + count)
    ]


def _expected(orders: int) -> dict[str, str]:
    """customer -> "name:ids" once the first `orders` orders are all counted."""
    ids: dict[str, list[str]] = {}
    for i in range(orders):
        ids.setdefault(f"c{i % len(CUSTOMERS)}", []).append(f"o{i:02d}")
    return {c: f"{CUSTOMERS[c]}:{','.join(sorted(v))}" for c, v in ids.items()}


def _latest(bootstrap: str, topic: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for record in kafka_io.read_all(bootstrap, topic):
        assert record.key is not None and record.value is not None
        out[record.key.decode()] = record.value.decode()
    return out


def _wait_output(app: StreamsApp, bootstrap: str, topic: str, want: dict[str, str]) -> None:
    try:
        kafka_io.wait_for(
            "the complete output", lambda: _latest(bootstrap, topic) == want, OUTPUT_TIMEOUT_S
        )
    except TimeoutError:
        got = _latest(bootstrap, topic)
        raise AssertionError(f"output {got} != {want}; app log:\n{app.log_tail()}") from None


def _run(broker_name: str, work_dir: Path, unique: Callable[[str], str]) -> dict[str, object]:
    app_id = unique("streams-app")
    orders, customers, out = unique("orders"), unique("customers"), unique("enriched")
    with restartable(broker_name, work_dir / "broker") as broker:
        bootstrap = broker.bootstrap
        kafka_io.create_topic(bootstrap, orders, 2)
        kafka_io.create_topic(bootstrap, customers, 1, {"cleanup.policy": "compact"})
        kafka_io.create_topic(bootstrap, out, 1)
        kafka_io.produce(
            bootstrap,
            customers,
            [(0, c.encode(), n.encode(), [], None) for c, n in CUSTOMERS.items()],
        )
        kafka_io.produce(bootstrap, orders, _orders(0, ORDERS // 2))
        app = StreamsApp(work_dir / "app", bootstrap, app_id, orders, customers, out)
        try:
            app.start()
            _wait_output(app, bootstrap, out, _expected(ORDERS // 2))
            app.kill()
            kafka_io.produce(bootstrap, orders, _orders(ORDERS // 2, ORDERS // 2))
            app.start()
            _wait_output(app, bootstrap, out, _expected(ORDERS))
        finally:
            app.kill()
        repartition = f"{app_id}-by-customer-repartition"
        changelog = f"{app_id}-orders-by-customer-changelog"
        assert {repartition, changelog} <= kafka_io.topic_names(bootstrap)
        return {
            "output": _latest(bootstrap, out),
            "changelog": _latest(bootstrap, changelog),
            "changelog_policy": kafka_io.topic_config(bootstrap, changelog)["cleanup.policy"],
            "repartition_partitions": kafka_io.partition_count(bootstrap, repartition),
        }


@pytest.mark.timeout(600)
def test_at_least_once_killed_and_restarted_as_on_kafka(
    tmp_path: Path, unique: Callable[[str], str]
) -> None:
    on_kafka = _run("kafka", tmp_path / "kafka", unique)
    assert on_kafka["output"] == _expected(ORDERS)
    assert on_kafka["changelog_policy"] == "compact"
    assert _run("tidelog", tmp_path / "tidelog", unique) == on_kafka
