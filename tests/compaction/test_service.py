"""The cleaner service the broker drives: workers, stop on shutdown, disabled cleaner."""

from __future__ import annotations

import threading

from compaction.config import CleanerConfig
from compaction.service import CleanerService
from storage.fileio import FileIO
from tests.compaction.helpers import Clock, append, latest_by_key, open_manager, read_all

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048"}


def service(logs, clock, io=None, **kw):
    config = CleanerConfig(dedupe_buffer_bytes=1 << 20, min_map_bytes=0, **kw)
    return CleanerService(config, logs.data_dir, logs.all_logs, io=io, clock_ms=clock)


def test_a_run_cleans_every_eligible_log(tmp_path):
    clock = Clock()
    logs = open_manager(tmp_path, clock)
    try:
        for topic in ("a", "b"):
            logs.create_topic(topic, 1, COMPACT)
            log = logs.get_log(topic, 0)
            for i in range(100):
                append(log, [(b"k%d" % (i % 3), b"v%d" % i)], clock())
            log.roll()
        cleaner = service(logs, clock)
        done = cleaner.run_worker(0)
        assert sorted(r.topic for r in done) == ["a", "b"]
        assert cleaner.run_worker(0) == []  # nothing left: the task backs off
        assert cleaner.statistics().cleanings_total == 2
        assert all(len(read_all(logs.get_log(t, 0))) == 3 for t in ("a", "b"))
    finally:
        logs.close()


class PausingIO(FileIO):
    """Blocks the first read of a `.log` until released: a cleaning caught mid-way."""

    def __init__(self) -> None:
        self.reading = threading.Event()
        self.release = threading.Event()
        self.armed = False

    def pread(self, fd, size, position):
        if self.armed:
            self.armed = False
            self.reading.set()
            self.release.wait(30)
        return super().pread(fd, size, position)


def test_request_stop_abandons_a_running_cleaning(tmp_path):
    clock = Clock()
    io = PausingIO()  # the log's own: the cleaner reads segments through the log
    logs = open_manager(tmp_path, clock, io)
    try:
        logs.create_topic("t", 1, COMPACT)
        log = logs.get_log("t", 0)
        for i in range(2000):
            append(log, [(b"k%d" % (i % 3), b"v%d" % i)], clock())
        log.roll()
        before = latest_by_key(read_all(log))
        cleaner = service(logs, clock, io)
        io.armed = True
        results = []
        worker = threading.Thread(target=lambda: results.append(cleaner.run_worker(0)))
        worker.start()
        assert io.reading.wait(30)
        cleaner.request_stop()
        io.release.set()
        worker.join(30)
        assert results == [[]]
        assert cleaner.statistics().aborted_total == 1
        assert cleaner.statistics().failures_total == 0
        assert latest_by_key(read_all(log)) == before
        assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".cleaned")]
    finally:
        logs.close()


def test_disabled_cleaner_has_no_workers(tmp_path):
    clock = Clock()
    logs = open_manager(tmp_path, clock)
    try:
        assert service(logs, clock, enable=False).workers == []
        assert len(service(logs, clock, threads=2).workers) == 2
    finally:
        logs.close()
