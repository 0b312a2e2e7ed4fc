"""File descriptors are a budget, not a cliff (issue 23, finding 1).

The scenarios run in a child process with a small RLIMIT_NOFILE
(tests/storage/fd_child.py), so exhausting it is cheap and harmless here.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import StorageError, TopicAlreadyExists
from storage.fdbudget import FD_COUNT_CACHE_FAR_S, FD_COUNT_CACHE_S, FdBudget, storage_limit
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import ManualClock

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600


def run_child(
    scenario: str, data_dir: Path, soft: int = LIMIT, hard: int = LIMIT
) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.storage.fd_child",
            scenario,
            str(data_dir),
            str(soft),
            str(hard),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_topic_past_the_budget_is_refused_up_front_and_leaves_nothing(tmp_path: Path) -> None:
    seen = run_child("create_big", tmp_path)
    code, message = seen["error"]
    assert code == "INVALID_PARTITIONS"
    assert "file descriptors" in message and "RLIMIT_NOFILE 600" in message
    assert not (tmp_path / "topics" / "big.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("big-")]
    assert seen["topics"] == ["small"]
    assert seen["topics_after_restart"] == ["small"]


def test_rolls_past_the_budget_are_deferred_not_failed(tmp_path: Path) -> None:
    seen = run_child("many_rolls", tmp_path)
    assert "error" not in seen, seen
    assert seen["appended"] == seen["high_watermark"] == 600
    assert seen["fds"] < LIMIT
    assert 1 < seen["segments"] < 600  # rolled while it could, then deferred
    assert seen["high_watermark_after_restart"] == 600


def test_a_start_leaves_a_topic_that_does_not_fit_unloaded(tmp_path: Path) -> None:
    """What the old bug left behind: metadata of a topic with more partitions than fit."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "huge.json").write_text(
        json.dumps({"version": 1, "topic": "huge", "partitions": 3000, "configs": {}})
    )
    for partition in range(50):
        (tmp_path / f"huge-{partition}").mkdir()
    seen = run_child("open_only", tmp_path)
    assert seen["topics"] == [] and seen["unloaded_topics"] == 1
    assert seen["topics_then"] == ["fresh"]
    assert (tmp_path / "topics" / "huge.json").exists()  # left for an operator
    assert (tmp_path / "huge-0").is_dir()  # not moved aside as a stray


def test_open_raises_the_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    seen = run_child("open_only", tmp_path, soft=300, hard=2000)
    assert seen["soft_limit"] == 2000


def test_a_failed_creation_is_rolled_back(tmp_path: Path) -> None:
    """All or nothing: an open failing half way removes every partition and no metadata
    is ever written; the next start does not see the topic."""
    io = FaultyFileIO()
    manager = LogManager(tmp_path, clock_ms=ManualClock(), io=io)
    manager.open()
    io.fail("open", errno.EMFILE, nth=1, path_contains="half-7")
    with pytest.raises(StorageError, match="creating topic 'half'"):
        manager.create_topic("half", 20)
    assert manager.topics() == []
    assert not (tmp_path / "topics" / "half.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("half-")]
    manager.create_topic("half", 2)  # the name is free again
    manager.close()
    reopened = LogManager(tmp_path, clock_ms=ManualClock())
    reopened.open()
    assert reopened.topics() == ["half"] and reopened.partition_count("half") == 2
    reopened.close()


def test_budget_counts_what_it_admitted_until_it_measures_again() -> None:
    now = [0.0]
    budget = FdBudget(1000, reserve=100, count=lambda: 500, clock=lambda: now[0])
    assert budget.headroom() == 400
    assert budget.allows(300) and not budget.allows(101) and budget.allows(100)
    now[0] += 1.0
    assert budget.headroom() == 400  # measured again: the fake count did not move


def test_budget_counts_again_sooner_the_closer_it_is_to_the_limit() -> None:
    """Listing /proc/self/fd costs per open descriptor: far from the limit (at least
    half the budget free) a count is trusted for FD_COUNT_CACHE_FAR_S, else for
    FD_COUNT_CACHE_S."""
    now, counted = [0.0], [100]
    budget = FdBudget(1000, reserve=100, count=lambda: counted[0], clock=lambda: now[0])
    assert budget.headroom() == 800  # 800 of 900 free: far
    counted[0] = 700
    now[0] += FD_COUNT_CACHE_S
    assert budget.headroom() == 800  # still the old count
    now[0] += FD_COUNT_CACHE_FAR_S
    assert budget.headroom() == 200  # 200 of 900 free: near, so the next count comes sooner
    counted[0] = 800
    now[0] += FD_COUNT_CACHE_S
    assert budget.headroom() == 100


def test_an_unloaded_topic_can_be_deleted(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "huge.json").write_text(
        json.dumps({"version": 1, "topic": "huge", "partitions": 3000, "configs": {}})
    )
    (tmp_path / "huge-0").mkdir()
    manager = LogManager(tmp_path, clock_ms=ManualClock(), fd_budget=FdBudget(600, reserve=450))
    manager.open()
    assert manager.statistics().unloaded_topics == 1
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("huge", 1)
    manager.delete_topic("huge")
    assert not (tmp_path / "topics" / "huge.json").exists() and not (tmp_path / "huge-0").exists()
    manager.create_topic("huge", 1)
    assert manager.topics() == ["huge"]
    manager.close()


@pytest.mark.parametrize(
    "body",
    [
        '{"version": 1, "topic": "bad", "partitions": 1000000000, "configs": {}}',
        '{"version": 1, "topic": "bad", "partitions": 0, "configs": {}}',
        '{"version": 1, "topic": "bad", "partitions": 2, "configs": {"retention.ms": "soon"}}',
        '{"version": 1, "topic": "bad", "partitions": 2, "configs": ["x"]}',
        "{not json",
    ],
    ids=["a-billion-partitions", "no-partitions", "bad-config", "configs-not-a-map", "not-json"],
)
def test_a_start_leaves_a_topic_with_unusable_metadata_unloaded(tmp_path: Path, body: str) -> None:
    """A start never fails for good on a file it can reason about (issue 23, the class
    of finding 1): one topic's bad metadata leaves that topic unloaded, not the broker
    down."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "bad.json").write_text(body)
    manager = LogManager(tmp_path, clock_ms=ManualClock())
    manager.open()
    assert manager.topics() == [] and manager.statistics().unloaded_topics == 1
    manager.create_topic("good", 1)
    assert manager.topics() == ["good"]
    manager.close()
    assert (tmp_path / "topics" / "bad.json").read_text() == body  # left for an operator


def test_the_map_count_caps_the_limit_when_it_is_lower() -> None:
    assert storage_limit(1_048_576, 65_530) == (65_530, "vm.max_map_count")
    assert storage_limit(20_000, 65_530) == (20_000, "RLIMIT_NOFILE")
    assert storage_limit(20_000, None) == (20_000, "RLIMIT_NOFILE")
