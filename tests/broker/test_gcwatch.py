"""GC pauses are timed per collection and long ones are logged."""

from __future__ import annotations

import gc
import io
import json

import pytest

from broker import gcwatch
from broker.gcwatch import GcWatch
from broker.logging import configure_logging

pytestmark = pytest.mark.usefixtures("restore_logging")


def test_each_collection_is_observed_with_its_generation() -> None:
    seen: list[tuple[int, float]] = []
    watch = GcWatch(lambda generation, pause_s: seen.append((generation, pause_s)))
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        watch.close()
    generations = [g for g, _ in seen]
    assert 0 in generations and 2 in generations
    assert all(pause_s >= 0 for _, pause_s in seen)
    count = len(seen)
    gc.collect()
    assert len(seen) == count, "close() removes the hook"


def test_a_long_pause_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    configure_logging(fmt="json", stream=out)
    monkeypatch.setattr(gcwatch, "GC_PAUSE_WARNING_S", 0.0)  # every pause counts as long
    watch = GcWatch(lambda generation, pause_s: None)
    try:
        gc.collect(2)
    finally:
        watch.close()
    events = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
    pauses = [e for e in events if e["event"] == "gc_pause"]
    assert pauses and pauses[-1]["generation"] == 2 and pauses[-1]["pause_s"] >= 0
