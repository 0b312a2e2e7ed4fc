"""Test-mode fsync journal for the power-loss simulation, loaded by Python's `site` hook.

A broker started with this directory on PYTHONPATH and `TIDELOG_TEST_FSYNC_JOURNAL`
set appends one line per successful fsync through `storage.fileio.FileIO`:
`F <inode> <size>` for a file (its first `size` bytes are durable) and
`D <dir> <name>/<inode> ...` for a directory (these entries are durable). The test
then cuts every file back to what was durable (tests/reliability/powerloss.py).
The wrapped calls still do the real fsync first: only the record is added, never a
change in behaviour.
"""

from __future__ import annotations

import os

JOURNAL_ENV = "TIDELOG_TEST_FSYNC_JOURNAL"


def _install(journal_path: str) -> None:
    from storage.fileio import FileIO

    journal_fd = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    real_fsync = FileIO.fsync
    real_fsync_dir = FileIO.fsync_dir

    def fsync(self: FileIO, fd: int) -> None:
        real_fsync(self, fd)
        st = os.fstat(fd)
        os.write(journal_fd, f"F {st.st_ino} {st.st_size}\n".encode())

    def fsync_dir(self: FileIO, path: os.PathLike) -> None:
        real_fsync_dir(self, path)
        entries = []
        for entry in os.scandir(path):
            entries.append(f"{entry.name}/{entry.inode()}")
        os.write(journal_fd, ("D " + "\t".join([os.fspath(path), *entries]) + "\n").encode())

    FileIO.fsync = fsync  # type: ignore[method-assign]
    FileIO.fsync_dir = fsync_dir  # type: ignore[method-assign]


if os.environ.get(JOURNAL_ENV):
    _install(os.environ[JOURNAL_ENV])
