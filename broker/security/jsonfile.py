"""A small JSON file in the data directory that the broker and the CLI both edit.

Why its own helper and not storage's `FileIO.write_atomic`: these files hold secrets
(SCRAM keys) or policy (ACLs), so they are created owner-only (0600), and two
writers (a running broker and `tidelog users add` on the same data directory) must
not lose each other's change: every edit is read-modify-write under an exclusive
`flock` on a sibling lock file. Readers never lock: they see the old or the new
content (temp file, fsync, rename, fsync of the directory), and `load_if_changed`
re-reads only when the file's identity or mtime moved, so the broker applies an
offline edit on its next check without a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Owner read/write only: the file is policy or key material.
FILE_MODE = 0o600
# Larger files are refused: a few thousand users or ACLs fit in far less.
FILE_BYTES_MAX = 64 * 1024 * 1024

Document = dict[str, Any]


class JsonFile:
    """One JSON document at `path`; an absent file reads as `empty()`."""

    def __init__(self, path: Path, empty: Callable[[], Document]) -> None:
        self.path = path
        self._empty = empty
        self._seen: tuple[int, int, int, int] | None = None

    def load(self) -> Document:
        """The document now on disk (ValueError if it is not valid JSON of the right shape)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(FILE_BYTES_MAX + 1)
        except FileNotFoundError:
            return self._empty()
        if len(data) > FILE_BYTES_MAX:
            raise ValueError(f"{self.path}: larger than {FILE_BYTES_MAX} bytes")
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError(f"{self.path}: expected a JSON object")
        return document

    def load_if_changed(self) -> Document | None:
        """The document if the file changed since the last call that returned one, else None."""
        try:
            st = os.stat(self.path)
            identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            identity = (0, 0, 0, 0)
        if identity == self._seen:
            return None
        document = self.load()
        self._seen = identity
        return document

    def update(self, edit: Callable[[Document], Document]) -> Document:
        """Apply `edit` to the current document under the lock and store the result."""
        with self._locked():
            document = edit(self.load())
            self._write(document)
            return document

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, document: Document) -> None:
        data = json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"
        temp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # a stale temp file may have had other bits
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
