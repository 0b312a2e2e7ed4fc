"""Disk full, read-only and shared data directories (DF-01..DF-03, DF-05, DF-06).

ENOSPC comes from a size-limited tmpfs (CI runs as root and may mount one). Where
mounting is refused the test runs the same scenario with ENOSPC injected through
storage's FileIO instead, and its id says so (`injected-fileio-fallback`).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from protocol.errors import StorageError
from storage.config import LogConfig
from storage.manager import LogManager
from tests.conftest import start_broker
from tests.faulty_io import FaultyFileIO
from tests.reliability.harness import (
    QUIET_START_SETTINGS,
    SMALL_SEGMENT_SETTINGS,
    start_load,
    wait_until,
    with_settings,
)
from tests.reliability.oracle import Ledger, verify
from tidelog.client import Client

ROOT = Path(__file__).resolve().parents[2]
# Size of the test file system: a few segments and their preallocated indexes.
TMPFS_BYTES = 3 * 1024 * 1024
# Space the test takes back once the disk is full ("an operator frees space").
FILLER_BYTES = 1024 * 1024
TOPICS = {"full": 2, "compacted": 1}
COMPACTED = frozenset({"compacted"})
TOPIC_CONFIGS = {
    "full": {"segment.bytes": "65536"},
    "compacted": {
        "segment.bytes": "16384",
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
    },
}
SETTINGS = with_settings(SMALL_SEGMENT_SETTINGS, "log.cleaner.backoff.ms=50")


def mount_tmpfs(target: Path, size_bytes: int) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(target)],
        capture_output=True,
    )
    return done.returncode == 0


def unmount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def _can_mount() -> bool:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "probe"
        if mount_tmpfs(probe, 1024 * 1024):
            unmount(probe)
            return True
    return False


CAN_MOUNT = _can_mount()
ENOSPC_SOURCE = "tmpfs" if CAN_MOUNT else "injected-fileio-fallback"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "mnt"
    assert mount_tmpfs(mount_point, TMPFS_BYTES), "mount refused"
    yield mount_point
    unmount(mount_point)


def one_batch(value: bytes = b"v" * 200) -> bytes:
    return encode_batch([(b"k", value, [], None)], now_ms=int(time.time() * 1000))


@pytest.mark.skipif(not CAN_MOUNT, reason="covered by the injected-fileio-fallback test")
@pytest.mark.timeout(180)
def test_enospc_from_a_full_tmpfs_then_writes_resume(tmp_path: Path, small_fs: Path) -> None:
    data_dir = small_fs / "data"
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * FILLER_BYTES)
    ledger = Ledger()
    broker = start_broker(data_dir, *SETTINGS)
    try:
        with Client(broker.bootstrap) as client:
            for topic, count in TOPICS.items():
                client.create_topic(topic, count, TOPIC_CONFIGS[topic])
        load = start_load(
            broker.bootstrap, ledger, TOPICS, producers=3, value_bytes=2000, keys={"compacted": 4}
        )
        full = wait_until(lambda: sum(s.storage_errors for s in load.stats) >= 30, 60, 0.1)
        time.sleep(1.0)  # stay full across rolls, cleanings and checkpoint writes
        load.finish()
        assert broker.proc.poll() is None, "broker died on a full disk:\n" + broker.output()[-3000:]
        assert full, f"the disk never filled up: {load.stats}"
        assert not [e for s in load.stats for e in s.other_errors]
        assert not any(s.disconnected for s in load.stats), "a producer lost its connection"
        # The full disk reached the background writers too, and they reported it.
        failed_ops = {e.get("operation") for e in broker.events("storage_error")}
        assert "append" in failed_ops, failed_ops
        with Client(broker.bootstrap) as client:
            # Reads and metadata keep working on a full disk.
            assert client.metadata()
            problems = verify(client, data_dir, ledger, TOPICS, compacted=COMPACTED)
            assert not problems, "\n".join(problems[:20])
            with pytest.raises(StorageError):
                for _ in range(50):
                    client.produce("full", 0, one_batch(b"x" * 20000), acks=-1)
            filler.unlink()
            # Space is back: every partition takes writes again.
            for topic, count in TOPICS.items():
                for partition in range(count):
                    client.produce(topic, partition, one_batch(), acks=-1)
        broker.kill()
        broker = start_broker(data_dir, *with_settings(SETTINGS, *QUIET_START_SETTINGS))
        with Client(broker.bootstrap) as client:
            problems = verify(client, data_dir, ledger, TOPICS, compacted=COMPACTED)
        assert not problems, "\n".join(problems[:20])
    finally:
        broker.kill()


@pytest.mark.parametrize("source", [ENOSPC_SOURCE], ids=[ENOSPC_SOURCE])
def test_enospc_on_append_and_roll_keeps_the_log_consistent(tmp_path: Path, source: str) -> None:
    """Storage level: ENOSPC on the log file and on a roll's new files, then space returns."""
    config = LogConfig(segment_bytes=1200, segment_index_bytes=256, index_interval_bytes=256)
    if source == "tmpfs":
        mount_point = tmp_path / "mnt"
        assert mount_tmpfs(mount_point, 512 * 1024)
        data_dir = mount_point / "data"
    else:
        data_dir = tmp_path / "data"
    io = FaultyFileIO()
    manager = LogManager(data_dir, config, io=io)
    try:
        manager.open()
        manager.create_topic("t", 1, {})
        log = manager.get_log("t", 0)
        acked = []
        if source == "tmpfs":
            filler = mount_point / "filler"
            with open(filler, "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
        else:
            io.fail("pwrite", errno.ENOSPC, persistent=True, path_contains="t-0")
        failures = 0
        for i in range(40):
            try:
                acked.append((log.append(one_batch(f"{i}".encode() * 100)).base_offset, i))
            except StorageError:
                failures += 1
        assert failures > 0
        end = log.log_end_offset
        assert [o for o, _ in acked] == list(range(end - len(acked), end))
        if source == "tmpfs":
            filler.unlink()
        io.clear()
        for i in range(10):  # crosses a roll
            assert log.append(one_batch(b"after" * 100)).base_offset == end + i
    finally:
        try:
            manager.close()
        finally:
            if source == "tmpfs":
                unmount(mount_point)


@pytest.mark.skipif(not CAN_MOUNT, reason="needs a tmpfs to make read-only (root ignores chmod)")
def test_read_only_data_dir_is_refused_with_a_clear_message(tmp_path: Path, small_fs: Path) -> None:
    data_dir = small_fs  # the mount itself: the fixture's stderr file lives beside it
    broker = start_broker(data_dir)
    assert broker.stop() == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    broker = start_broker(data_dir, wait=False)
    assert broker.proc.wait(timeout=30) != 0
    broker.kill()
    output = broker.output()
    assert str(data_dir) in output
    assert "Read-only" in output or "EROFS" in output or "read-only" in output


def test_second_broker_on_the_same_dir_is_refused(tmp_path: Path) -> None:
    first = start_broker(tmp_path / "data")
    try:
        second = start_broker(tmp_path / "data", wait=False)
        assert second.proc.wait(timeout=30) != 0
        second.kill()
        assert "locked by another process" in second.output()
        with Client(first.bootstrap) as client:  # the first is unaffected
            client.create_topic("still-here", 1)
            assert client.produce("still-here", 0, one_batch(), acks=-1).base_offset == 0
    finally:
        assert first.stop() == 0


# A child that fills an index's first page to its last entry, fills the disk, then appends:
# the next index entry needs a new block. It must get StorageError, not die of SIGBUS.
SIGBUS_CHILD = """
import sys
from pathlib import Path
from protocol.batch import encode_batch
from protocol.errors import StorageError
from storage.config import LogConfig
from storage.manager import LogManager
data = Path(sys.argv[1])
m = LogManager(data / "data", LogConfig(segment_bytes=1024 * 1024, segment_index_bytes=64 * 1024,
               index_interval_bytes=1))
m.open()
m.create_topic("t", 1, {})
log = m.get_log("t", 0)
# 511 offset-index entries fill the index's first page to its last 8 bytes.
for i in range(511):
    log.append(encode_batch([(b"k", b"v" * 40, None, 1_700_000_000_000)]))
with open(data / "filler", "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"x" * 4096)
    except OSError:
        pass
errors = 0
for i in range(20):
    try:
        log.append(encode_batch([(b"k", b"v" * 40, None, 1_700_000_000_000)]))
    except StorageError:
        errors += 1
print("survived", errors)
"""


@pytest.mark.skipif(not CAN_MOUNT, reason="needs a tmpfs to fill (ENOSPC inside an index page)")
def test_full_disk_gives_storage_errors_not_sigbus(tmp_path: Path, small_fs: Path) -> None:
    """Regression: index entries written through a shared map died of SIGBUS on a full disk."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SIGBUS_CHILD, str(small_fs)], env=env, cwd=ROOT, capture_output=True
    )
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    assert b"survived" in done.stdout
