"""Local reads: a task on the broker's host reads fetched batches from the segment file.

A fetch answer of a large read normally travels from the broker's page cache through
loopback TCP: the broker spends about 0.05 CPU-s per 100 MB on it, and the task copies
it out of the socket. When the task runs on the broker's host it can ask for where the
batches lie instead (`local_read`, docs/protocol.md §9) and `pread` them from the
segment file: one copy, no TCP, and the broker only locates them. As with HDFS
short-circuit reads, filesystem permissions decide whether the task may open the file.

Anything unexpected (the file was renamed or replaced: the device and inode no longer
match; no permission; a short read; bytes that do not start with the batch holding the
wanted offset) returns None and the caller fetches the same offset the ordinary way.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from protocol.connection import parse_address
from protocol.errors import CorruptMessage
from protocol.kafka.stored import iter_any_headers

log = logging.getLogger("spark_connector")

# Failed local reads after which a task stops asking (e.g. the broker's files are not
# readable by the executor's user); each failure costs one extra round trip.
MAX_LOCAL_FAILURES = 3
# Segment files kept open per task: a partition's reads walk its segments in order.
MAX_OPEN_FILES = 16
INITIAL_BUFFER_BYTES = 1024 * 1024


def local_reads_wanted(setting: str, bootstrap_servers: str) -> bool:
    """`localReads`: true, false, or auto = the broker is on a loopback address."""
    if setting != "auto":
        return setting == "true"
    server = bootstrap_servers.split(",")[0].strip()
    try:
        host, _ = parse_address(server)
    except ValueError:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LocalFiles:
    """One task's open segment files and the buffer local reads land in.

    The view `read` returns is valid until the next `read` (the caller converts it
    first, as with the task connection's receive buffer).
    """

    def __init__(self) -> None:
        self.enabled = True
        self.reads = 0  # answers read from the segment file
        self.failures = 0  # answers fetched again over the wire instead
        self._files: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)
        self._view = memoryview(b"")

    def read(self, local: Mapping[str, Any], offset: int) -> memoryview | None:
        """The batches `local` describes, or None (then fetch them over the wire)."""
        problem = self._problem(local, offset)
        if problem is None:
            self.reads += 1
            return self._view
        self.failures += 1
        if self.failures >= MAX_LOCAL_FAILURES and self.enabled:
            self.enabled = False
            log.info("local reads off for this task after %d failures: %s", self.failures, problem)
        return None

    def _problem(self, local: Mapping[str, Any], offset: int) -> str | None:
        length = local["length"]
        fd = self._open(local["path"], local["device"], local["inode"])
        if fd is None:
            return f"cannot open {local['path']} as the broker's file"
        if len(self._buffer) < length:
            self._buffer = bytearray(length)  # a new buffer: views of the old stay valid
        view = memoryview(self._buffer)[:length]
        try:
            got = os.preadv(fd, [view], local["position"])
        except OSError as exc:
            return f"cannot read {local['path']}: {exc}"
        if got != length:
            return f"{local['path']} is shorter than the broker said"
        try:
            first = next(iter(iter_any_headers(view)), None)
        except CorruptMessage as exc:
            return f"{local['path']} holds no batch where the broker said: {exc.message}"
        if first is None or first[1].next_offset <= offset:
            return f"{local['path']} does not hold offset {offset} where the broker said"
        self._view = view
        return None

    def _open(self, path: str, device: int, inode: int) -> int | None:
        cached = self._files.get(path)
        if cached is not None:
            if cached[1:] == (device, inode):
                self._files.move_to_end(path)
                return cached[0]
            os.close(self._files.pop(path)[0])  # replaced since (e.g. by the cleaner)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        stat = os.fstat(fd)
        if (stat.st_dev, stat.st_ino) != (device, inode):
            os.close(fd)
            return None
        self._files[path] = (fd, device, inode)
        if len(self._files) > MAX_OPEN_FILES:
            os.close(self._files.popitem(last=False)[1][0])
        return fd

    def close(self) -> None:
        while self._files:
            os.close(self._files.popitem()[1][0])
