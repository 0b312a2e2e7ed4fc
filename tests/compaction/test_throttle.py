"""The cleaner's I/O throttle and its settings."""

from __future__ import annotations

import math

import pytest

from compaction.config import MIN_IO_CHUNK_BYTES, CleanerConfig
from compaction.throttle import CHECK_INTERVAL_S, Throttler


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_sleeps_back_down_to_the_rate():
    t = FakeTime()
    throttler = Throttler(1000.0, monotonic=t.monotonic, sleep=t.sleep)
    throttler.maybe_throttle(100)  # too early to measure
    assert t.slept == []
    t.now += CHECK_INTERVAL_S
    throttler.maybe_throttle(900)  # 1000 bytes in 0.3 s: should have taken 1 s
    assert t.slept == [pytest.approx(1.0 - CHECK_INTERVAL_S)]
    assert throttler.slept_s == pytest.approx(0.7)


def test_under_the_rate_never_sleeps():
    t = FakeTime()
    throttler = Throttler(10_000.0, monotonic=t.monotonic, sleep=t.sleep)
    for _ in range(10):
        t.now += CHECK_INTERVAL_S
        throttler.maybe_throttle(100)
    assert t.slept == []


def test_unlimited_is_free():
    t = FakeTime()
    throttler = Throttler(math.inf, monotonic=t.monotonic, sleep=t.sleep)
    t.now += 10
    throttler.maybe_throttle(10**12)
    assert throttler.unlimited and t.slept == []


def test_config_from_kafka_names_and_derived_values():
    config = CleanerConfig.from_props(
        {
            "log.cleaner.enable": "false",
            "log.cleaner.threads": "2",
            "log.cleaner.dedupe.buffer.size": str(8 << 20),
            "log.cleaner.io.buffer.size": "1048576",
            "log.cleaner.backoff.ms": "100",
        }
    )
    assert not config.enable
    assert config.map_bytes_per_thread == 4 << 20
    assert config.io_chunk_bytes == 1048576 // 2 // 2
    assert CleanerConfig(io_buffer_bytes=1).io_chunk_bytes == MIN_IO_CHUNK_BYTES
    assert config.backoff_ms == 100


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"threads": -1}, id="negative-threads"),
        pytest.param({"threads": 200, "dedupe_buffer_bytes": 100 << 20}, id="map-too-small"),
        pytest.param({"io_buffer_load_factor": 0.0}, id="zero-load-factor"),
        pytest.param({"io_buffer_load_factor": 1.5}, id="load-factor-above-one"),
        pytest.param({"backoff_ms": -1}, id="negative-backoff"),
    ],
)
def test_invalid_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        CleanerConfig(**kwargs)
