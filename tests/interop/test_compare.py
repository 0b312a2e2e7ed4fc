"""The differential helper: its normalisation, and Kafka compared with Kafka.

Two independent real brokers (and one broker twice) must look identical to every
client once run-specific names and clocks are normalised; a real difference (a topic
that already holds a record) must be reported; then Tidelog against Apache Kafka.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from interop.compare import BROKER_CLOCK, PRODUCER_CLOCK, compare_runs, differences, normalise
from interop.differential import run_differential, run_scenario, supported
from interop.observed import LOG_APPEND_TIME, T0_MS, observed_record
from interop.scenarios import CLIENTS
from interop.targets import Target

pytestmark = pytest.mark.interop

CASES = [(client, scenario) for client in CLIENTS for scenario in supported(client)]


def test_normalise_masks_names_and_clocks_but_keeps_chosen_timestamps() -> None:
    chosen = observed_record(0, 5, b"k", b"v", [("h", b"x")], T0_MS, "create_time")
    own_clock = observed_record(0, 6, None, None, None, 1_795_000_000_000, "create_time")
    broker = observed_record(1, 0, b"k", b"", None, T0_MS, LOG_APPEND_TIME)
    seen = {"assignment": [("t-1", 0)], "records": [chosen, own_clock, broker]}
    got = normalise(seen, {"t-1": "<topic>"})
    assert got["assignment"] == [("<topic>", 0)]
    assert [r["timestamp_ms"] for r in got["records"]] == [T0_MS, PRODUCER_CLOCK, BROKER_CLOCK]
    assert got["records"][0]["headers"] == [("h", b"x")]


def test_differences_name_the_path_and_both_values() -> None:
    a = {"latest": {0: 4, 1: 3}, "records": [{"offset": 0}], "only_a": True}
    b = {"latest": {0: 4, 1: 2}, "records": [{"offset": 1}], "only_b": True}
    assert differences(a, b) == [
        "$.latest.1: 3 != 2",
        "$.only_a: missing on the second target",
        "$.only_b: only on the second target",
        "$.records[0].offset: 0 != 1",
    ]
    assert differences([1, 2], [1]) == ["$: 2 items != 1 items"]
    assert compare_runs({"t": "x-1"}, {"x-1": "<topic>"}, {"t": "x-2"}, {"x-2": "<topic>"}) == []


@pytest.mark.parametrize(("client", "scenario"), CASES)
def test_two_kafka_brokers_look_the_same(
    kafka: Target, kafka_b: Target, client: str, scenario: str
) -> None:
    assert run_differential(client, scenario, kafka.bootstrap, kafka_b.bootstrap) == []


@pytest.mark.parametrize(("client", "scenario"), CASES)
def test_kafka_and_tidelog_look_the_same(
    kafka: Target, tidelog: Target, client: str, scenario: str
) -> None:
    """Issue 19's differential suite: every client scenario sees Tidelog as it sees
    Apache Kafka (admin and group scenarios need the kafka-admin and groups branches)."""
    assert run_differential(client, scenario, kafka.bootstrap, tidelog.bootstrap) == []


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_one_broker_twice_looks_the_same(kafka: Target, client: str) -> None:
    assert run_differential(client, "offsets", kafka.bootstrap, kafka.bootstrap) == []


def test_a_real_difference_is_reported(kafka: Target, unique: Callable[[str], str]) -> None:
    """A topic that already holds the samples (a run that reused it) is caught."""
    clean, clean_names = run_scenario("kcat", "produce_consume", kafka.bootstrap)
    dirty_topic = unique("dirty")
    CLIENTS["kcat"].produce_consume(kafka.bootstrap, dirty_topic, "none")
    dirty = CLIENTS["kcat"].produce_consume(kafka.bootstrap, dirty_topic, "none")
    found = compare_runs(clean, clean_names, dirty, {dirty_topic: "<topic>"})
    assert found[0] == "$.records: 4 items != 8 items"
