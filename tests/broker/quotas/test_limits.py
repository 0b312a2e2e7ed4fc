"""Client quotas without a broker: Kafka's sampled rate and throttle time, its
precedence of user / client-id entities (with defaults), and the store kept in the
data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.quotas.limits import ClientQuotas
from broker.quotas.rate import SampledRate
from broker.quotas.store import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    USER,
    QuotaStore,
    entity_of,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def test_a_rate_is_measured_over_at_least_samples_minus_one_windows() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(5000, 0.0)
    # One event: the span counts as ten whole windows, not a few milliseconds.
    assert rate.measure(0.0) == pytest.approx(500.0)
    assert rate.window_ms(500.0) == pytest.approx(10_500.0)


def test_the_throttle_brings_the_rate_back_to_the_bound() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(20_000, 0.0)  # 2000/s over 10 s against a bound of 1000/s
    throttle = rate.throttle_ms(1000.0, 0.0)
    assert throttle == 10_000  # Kafka's QuotaUtils.throttleTime: (2000 - 1000) / 1000 * 10 s
    assert rate.throttle_ms(1000.0, 11_000.0) == 0  # the sample has expired by then
    assert rate.throttle_ms(5000.0, 0.0) == 0


def test_samples_idle_for_the_whole_window_are_forgotten() -> None:
    rate = SampledRate(samples=3, window_ms=1000)
    rate.record(9000, 0.0)
    assert rate.measure(1000.0) > 0
    assert rate.measure(3000.0) == 0.0


def _quotas(
    tmp_path: Path, *entries: tuple[dict[str, str | None], dict[str, float]]
) -> ClientQuotas:
    store = QuotaStore(tmp_path)
    store.apply({entity_of(e.items()): q for e, q in entries})
    return ClientQuotas(store, clock_ms=Clock())


# Kafka's order (ClientQuotaManager): the first entity that sets the key wins.
PRECEDENCE = [
    ({USER: "alice", CLIENT_ID: "app"}, ("alice", "app")),
    ({USER: "alice", CLIENT_ID: None}, ("alice", "app")),
    ({USER: "alice"}, ("alice", "")),
    ({USER: None, CLIENT_ID: "app"}, ("alice", "app")),
    ({USER: None, CLIENT_ID: None}, ("alice", "app")),
    ({USER: None}, ("alice", "")),
    ({CLIENT_ID: "app"}, ("", "app")),
    ({CLIENT_ID: None}, ("", "app")),
]


@pytest.mark.parametrize("rank", range(len(PRECEDENCE)))
def test_the_most_specific_entity_gives_the_limit_and_who_shares_it(
    tmp_path: Path, rank: int
) -> None:
    entries = [
        (entity, {PRODUCER_BYTE_RATE: 100.0 + i}) for i, (entity, _) in enumerate(PRECEDENCE)
    ]
    quotas = _quotas(tmp_path, *entries[rank:])
    assert quotas.limit(PRODUCER_BYTE_RATE, "alice", "app") == (100.0 + rank, PRECEDENCE[rank][1])
    assert quotas.limit(CONSUMER_BYTE_RATE, "alice", "app") is None


def test_a_user_quota_is_shared_by_its_clients_and_no_one_elses(tmp_path: Path) -> None:
    quotas = _quotas(tmp_path, ({USER: "alice"}, {PRODUCER_BYTE_RATE: 1000.0}))
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "one", 6000) == 0
    assert quotas.record(PRODUCER_BYTE_RATE, "alice", "two", 6000) > 0  # 12 kB over 10 s
    assert quotas.record(PRODUCER_BYTE_RATE, "bob", "two", 1e9) == 0  # bob has no quota


def test_an_unrecorded_fetch_leaves_the_rate_as_it_was(tmp_path: Path) -> None:
    quotas = _quotas(tmp_path, ({CLIENT_ID: "c"}, {CONSUMER_BYTE_RATE: 1000.0}))
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 20_000) > 0
    quotas.unrecord(CONSUMER_BYTE_RATE, "u", "c", 20_000)
    assert quotas.record(CONSUMER_BYTE_RATE, "u", "c", 5000) == 0
    assert quotas.max_in_window(CONSUMER_BYTE_RATE, "u", "c") == 10_000.0


def test_the_store_keeps_the_quotas_across_a_restart(tmp_path: Path) -> None:
    store = QuotaStore(tmp_path)
    alice = entity_of([(USER, "alice"), (CLIENT_ID, None)])
    store.apply({alice: {PRODUCER_BYTE_RATE: 1024.0, CONSUMER_BYTE_RATE: 2048.0}})
    store.apply({alice: {CONSUMER_BYTE_RATE: None}})
    assert (tmp_path / "client-quotas.json").stat().st_mode & 0o777 == 0o600
    assert QuotaStore(tmp_path).entities() == {alice: {PRODUCER_BYTE_RATE: 1024.0}}
    store.apply({alice: {PRODUCER_BYTE_RATE: None}})
    assert QuotaStore(tmp_path).entities() == {}
    assert not QuotaStore(tmp_path)
