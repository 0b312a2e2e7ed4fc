"""Power-cut simulation (docs/reliability.md CC-08): after the "crash" every file keeps
only what was fsynced, and files whose directory entry was never fsynced vanish.

`acks: -1` data (appended, then flushed) must all survive; the rest may be lost but
the log must stay a valid, gap-free prefix.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.config import LogConfig
from storage.fileio import FileIO
from tests.storage.helpers import batch, open_test_log, read_all

CONFIG = LogConfig(segment_bytes=700, segment_index_bytes=128, index_interval_bytes=50)


class JournalIO(FileIO):
    """Records, per path, the length at the last fsync and the directory entries fsynced."""

    def __init__(self) -> None:
        self.synced: dict[str, int] = {}
        self.durable_names: dict[str, set[str]] = {}
        self._paths: dict[int, str] = {}

    def open(
        self, path: Path, *, create: bool = False, writable: bool = True, exclusive: bool = False
    ) -> int:
        fd = super().open(path, create=create, writable=writable, exclusive=exclusive)
        self._paths[fd] = str(path)
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.synced[self._paths[fd]] = os.fstat(fd).st_size

    def fsync_dir(self, path: Path) -> None:
        super().fsync_dir(path)
        self.durable_names[str(path)] = set(os.listdir(path))

    def cut_power(self, directory: Path, rng: random.Random) -> None:
        durable = self.durable_names.get(str(directory), set())
        for entry in os.listdir(directory):
            path = directory / entry
            if entry not in durable:
                path.unlink()
            elif entry.endswith(".log"):
                synced = self.synced.get(str(path), 0)
                with open(path, "r+b") as f:
                    f.truncate(synced)
                    f.seek(synced)
                    f.write(rng.randbytes(rng.randrange(0, 40)))  # torn sectors


@settings(max_examples=25, deadline=None)
@given(
    plan=st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=25),
    seed=st.integers(0, 2**32),
)
def test_flushed_appends_survive_a_power_cut(plan, seed) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-power-") as name:
        run_power_cut(Path(name), plan, seed)


def run_power_cut(directory: Path, plan: list[tuple[int, bool]], seed: int) -> None:
    io = JournalIO()
    log = open_test_log(directory, CONFIG, io=io, clean=False)
    # Nothing fsyncs the new partition directory here: the log's first flush must
    # make its segment's entries durable (a first acks=-1 before any roll lost them).
    acked: list[tuple[int, bytes | None]] = []
    for i, (count, flush) in enumerate(plan):
        info = log.append(batch(count, tag=i))
        if flush:
            log.flush()
            acked = read_all(log)  # everything up to here is acks=-1 durable
        assert info.base_offset >= 0
    recovery_point = log.recovery_point
    del log
    io.cut_power(directory, random.Random(seed))
    reopened = open_test_log(directory, CONFIG, clean=False, recovery_point=recovery_point)
    survived = read_all(reopened)
    assert survived[: len(acked)] == acked
    assert [o for o, _ in survived] == list(range(len(survived)))
    assert reopened.append(batch(1)).base_offset == reopened.log_end_offset - 1
