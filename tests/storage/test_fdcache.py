"""Segment files opened on demand (storage/fdcache.py, storage/mapping.py; issue 34, item 7)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from storage.fdcache import MIN_CAPACITY, Descriptor, LazyFile, LruCache
from storage.fileio import FileIO
from storage.index import OffsetIndex
from storage.mapping import map_readonly


class _Counter(LazyFile):
    """A LazyFile of a private cache, to watch releases without the process's cache."""

    def __init__(self, cache: LruCache, path: Path) -> None:
        super().__init__(FileIO(), path)
        self._cache.forget(self)
        self._cache = cache


def _open_fds() -> set[str]:
    paths = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            paths.add(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:
            pass  # the listing's own descriptor
    return paths


def _mapped(path: Path) -> int:
    with open("/proc/self/maps") as maps:
        return sum(str(path) in line for line in maps)


def test_the_cache_keeps_at_most_its_capacity_least_recently_used_out(tmp_path: Path) -> None:
    cache = LruCache("test", MIN_CAPACITY)
    files = []
    for n in range(MIN_CAPACITY + 5):
        (tmp_path / f"f{n}").write_bytes(b"x")
        files.append(_Counter(cache, tmp_path / f"f{n}"))
    for lazy in files[:MIN_CAPACITY]:
        lazy.get()
    files[0].get()  # the first becomes the most recently used
    for lazy in files[MIN_CAPACITY:]:
        lazy.get()
    assert len(cache) == MIN_CAPACITY
    assert files[0].is_open and not files[1].is_open
    assert cache.released == 5
    assert sum(str(tmp_path) in path for path in _open_fds()) == MIN_CAPACITY


def test_a_release_never_closes_a_descriptor_a_reader_holds(tmp_path: Path) -> None:
    cache = LruCache("test", MIN_CAPACITY)
    path = tmp_path / "held"
    path.write_bytes(b"payload")
    lazy = _Counter(cache, path)
    held: Descriptor = lazy.get()
    lazy.drop()  # what the cache does past its capacity
    assert os.pread(held.fd, 7, 0) == b"payload"
    fd = held.fd
    del held
    with pytest.raises(OSError):
        os.fstat(fd)  # the last user let go: closed
    assert lazy.get().fd >= 0  # reopened on demand


def test_a_file_replaced_under_its_name_is_refused_not_read(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"old")
    lazy = LazyFile(FileIO(), path)
    lazy.get()
    lazy.drop()
    swap = tmp_path / "segment.log.swap"
    swap.write_bytes(b"new")
    swap.replace(path)  # a cleaned segment swapped in under the same name
    with pytest.raises(FileNotFoundError, match="replaced"):
        lazy.get()


def test_an_owner_that_goes_away_takes_its_descriptor_with_it(tmp_path: Path) -> None:
    path = tmp_path / "gone.log"
    path.write_bytes(b"x")
    lazy = LazyFile(FileIO(), path)
    lazy.get()
    assert str(path) in _open_fds()
    del lazy
    gc.collect()
    assert str(path) not in _open_fds()


def test_a_map_keeps_no_descriptor_and_lives_as_long_as_its_views(tmp_path: Path) -> None:
    path = tmp_path / "entries"
    path.write_bytes(np.arange(1000, dtype=">i4").tobytes())
    fd = os.open(path, os.O_RDONLY)
    view = map_readonly(fd, 4000, np.dtype(">i4"))
    os.close(fd)
    assert str(path) not in _open_fds() and _mapped(path) == 1
    part = view[10:12]
    del view
    assert list(part) == [10, 11] and _mapped(path) == 1
    del part
    assert _mapped(path) == 0


def test_an_index_reads_through_a_map_it_reopens_after_a_release(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, FileIO(), preallocate_bytes=800)
    for n in range(10):
        index.append(n * 10, n * 100)
    index.release_writer()
    index._map.drop()  # what the map cache does past its capacity
    assert str(tmp_path / "0.index") not in _open_fds()
    assert index.lookup(55) == (50, 500)
    assert str(tmp_path / "0.index") not in _open_fds()  # mapped, no descriptor kept
