"""File descriptors are a budget, not a cliff (issue 23, finding 1; issue 34, item 7;
issue 38, item 4).

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

from protocol.errors import InvalidPartitions, StorageError, TopicAlreadyExists
from storage.fdbudget import FD_COUNT_CACHE_FAR_S, FD_COUNT_CACHE_S, FdBudget
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import ManualClock, batch

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


def test_partitions_are_not_bounded_by_descriptors(tmp_path: Path) -> None:
    """Issue 34, item 7: segments keep no descriptor while idle (storage.fdcache), so
    900 partitions take a record each and serve it under a 300-descriptor limit,
    before and after a restart."""
    seen = run_child("create_big", tmp_path, soft=300, hard=300)
    assert seen["served"] == seen["served_after_restart"] == 900
    assert seen["topics_after_restart"] == ["big"]
    assert seen["fds"] < 300 and seen["fds_after_restart"] < 300


def test_at_the_limit_storage_releases_its_own_and_keeps_serving(tmp_path: Path) -> None:
    """With every descriptor but four taken elsewhere (say, by connections), a new
    topic is still created and existing partitions still append and read: the cache
    releases the descriptors it keeps to make room."""
    seen = run_child("at_the_limit", tmp_path)
    assert "create_error" not in seen, seen
    assert seen["served_at_limit"] == 50 and seen["errors_at_limit"] == []
    assert seen["served_after"] == 50 and seen["topics"] == ["new", "old"]


def test_a_topic_is_refused_up_front_when_nothing_can_be_released(tmp_path: Path) -> None:
    """Others hold every descriptor and storage keeps none it could release: refused
    with the budget's numbers, nothing half created."""
    budget = FdBudget(600, reserve=100, count=lambda: 599, releasable=lambda: 0)
    manager = LogManager(tmp_path, clock_ms=ManualClock(), fd_budget=budget)
    manager.open()
    with pytest.raises(InvalidPartitions, match="file descriptors") as refused:
        manager.create_topic("late", 3)
    assert "0 of the limit 600 are free" in refused.value.message
    assert manager.topics() == [] and not (tmp_path / "topics" / "late.json").exists()
    manager.close()


def test_rolls_past_the_limit_keep_rolling(tmp_path: Path) -> None:
    seen = run_child("many_rolls", tmp_path)
    assert "error" not in seen, seen
    assert seen["appended"] == seen["high_watermark"] == 600
    assert seen["fds"] < LIMIT
    assert seen["segments"] == 600  # every roll: a segment keeps nothing open while idle
    assert seen["high_watermark_after_restart"] == 600


def test_a_start_loads_every_accepted_topic_whatever_the_limit(tmp_path: Path) -> None:
    """Issue 38, item 4: loading used to admit more descriptors per partition than
    creation did, and left accepted topics unloaded. A topic of 1,000 partitions (50
    of them with directories already) loads whole under a 300-descriptor limit."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "topics" / "huge.json").write_text(
        json.dumps({"version": 1, "topic": "huge", "partitions": 1000, "configs": {}})
    )
    for partition in range(50):
        (tmp_path / f"huge-{partition}").mkdir()
    seen = run_child("open_only", tmp_path, soft=300, hard=300)
    assert seen["topics"] == ["huge"] and seen["unloaded_topics"] == 0
    assert seen["topics_then"] == ["fresh", "huge"]


def test_open_raises_the_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    seen = run_child("open_only", tmp_path, soft=300, hard=2000)
    assert seen["soft_limit"] == 2000


def test_a_failed_creation_is_rolled_back(tmp_path: Path) -> None:
    """All or nothing: an open failing half way removes every partition and no metadata
    is ever written; the next start does not see the topic."""
    io = FaultyFileIO()
    manager = LogManager(tmp_path, clock_ms=ManualClock(), io=io)
    manager.open()
    # Persistent: one EMFILE is retried after the descriptor cache released some.
    io.fail("open", errno.EMFILE, persistent=True, path_contains="half-7")
    with pytest.raises(StorageError, match="creating topic 'half'"):
        manager.create_topic("half", 20)
    io.clear()
    assert manager.topics() == []
    assert not (tmp_path / "topics" / "half.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("half-")]
    manager.create_topic("half", 2)  # the name is free again
    manager.close()
    reopened = LogManager(tmp_path, clock_ms=ManualClock())
    reopened.open()
    assert reopened.topics() == ["half"] and reopened.partition_count("half") == 2
    reopened.close()


def test_budget_counts_what_storage_could_release_as_room() -> None:
    now, cached = [0.0], [0]
    budget = FdBudget(
        1000, reserve=100, count=lambda: 500, clock=lambda: now[0], releasable=lambda: cached[0]
    )
    assert budget.headroom() == 400
    assert budget.allows(400) and not budget.allows(401)
    cached[0] = 300  # 300 of the 500 counted are storage's own, kept in its cache
    now[0] += FD_COUNT_CACHE_FAR_S
    assert budget.headroom() == 700 and budget.allows(700)


def test_budget_counts_again_sooner_the_closer_it_is_to_the_limit() -> None:
    """Listing /proc/self/fd costs per open descriptor: far from the limit (at least
    half the budget free) a count is trusted for FD_COUNT_CACHE_FAR_S, else for
    FD_COUNT_CACHE_S."""
    now, counted = [0.0], [100]
    budget = FdBudget(
        1000,
        reserve=100,
        count=lambda: counted[0],
        clock=lambda: now[0],
        releasable=lambda: 0,
    )
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
        json.dumps({"version": 1, "topic": "huge", "partitions": 2, "configs": {"x": 1}})
    )
    (tmp_path / "huge-0").mkdir()
    manager = LogManager(tmp_path, clock_ms=ManualClock())
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


def test_a_roll_without_room_is_deferred_and_the_append_still_lands(tmp_path: Path) -> None:
    """Others hold every descriptor (storage keeps none it could release): a roll is
    deferred and the active segment takes the append, rather than failing half way."""
    held, now = [0], [0.0]
    budget = FdBudget(
        600, reserve=100, count=lambda: held[0], clock=lambda: now[0], releasable=lambda: 0
    )
    manager = LogManager(tmp_path, clock_ms=ManualClock(), fd_budget=budget)
    manager.open()
    manager.create_topic("full", 1, {"segment.bytes": "100"})
    plog = manager.get_log("full", 0)
    plog.append(batch(1))
    plog.append(batch(1))  # rolls: room
    held[0] = 600
    now[0] += FD_COUNT_CACHE_FAR_S  # the next check counts again
    plog.append(batch(1))
    assert plog._local.rolls_deferred == 1 and plog.segment_count == 2
    assert plog.high_watermark == 3
    manager.close()
