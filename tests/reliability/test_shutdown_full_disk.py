"""A graceful stop on a full disk is reported as a failed shutdown, not a failed start
(issue 23, minor finding)."""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest

from tests.conftest import start_broker
from tests.reliability.test_disk_full import CAN_MOUNT, mount_tmpfs, one_batch, unmount
from tidelog.client import Client

TMPFS_BYTES = 2 * 1024 * 1024


def fill(directory: Path) -> None:
    """Write until the file system answers ENOSPC."""
    with open(directory / "filler", "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


@pytest.mark.skipif(not CAN_MOUNT, reason="needs a size-limited tmpfs (mount refused)")
@pytest.mark.timeout(120)
def test_a_stop_on_a_full_disk_logs_shutdown_failed(tmp_path: Path) -> None:
    mount_point = tmp_path / "mnt"
    assert mount_tmpfs(mount_point, TMPFS_BYTES)
    try:
        broker = start_broker(mount_point / "data")
        try:
            with Client(broker.bootstrap) as client:
                client.create_topic("t", 4)
                for partition in range(4):
                    client.produce("t", partition, one_batch(), acks=1)
            fill(mount_point)
            status = broker.stop(signal.SIGTERM)
        finally:
            broker.kill()
        assert status == 1, broker.output()[-2000:]
        assert broker.events("broker_ready")
        assert not broker.events("startup_failed"), broker.output()[-2000:]
        failed = broker.events("shutdown_failed")
        assert failed and "No space left" in failed[0]["reason"], broker.output()[-2000:]
    finally:
        unmount(mount_point)
