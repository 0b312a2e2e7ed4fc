"""The chunk cache against a reference: any read of any object through the cache is
the object's bytes; the cache never holds more than its cap; a short body is refused.
The store here is a dict of objects (the cache only ever calls `fetch`); the real
store is exercised in test_remote_read.py and test_tiered_fetch.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import RemoteStorageError
from storage.remote.chunk_cache import ChunkCache

OBJECTS = {
    f"k{i}": bytes((i * 7 + n) % 251 for n in range(size))
    for i, size in enumerate((1, 100, 257, 1000, 4096))
}


class Store:
    def __init__(self) -> None:
        self.gets = 0
        self.truncate: set[str] = set()

    def fetch(self, key: str, start: int, length: int) -> bytes:
        self.gets += 1
        data = OBJECTS[key][start : start + length]
        return data[:-1] if key in self.truncate else data


reads = st.lists(
    st.tuples(
        st.sampled_from(sorted(OBJECTS)),
        st.integers(0, 4200),
        st.integers(1, 3000),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(reads=reads, chunk=st.sampled_from([64, 100, 256]), chunks_kept=st.integers(1, 12))
def test_reads_through_the_cache_are_the_objects_bytes(
    reads: list[tuple[str, int, int]], chunk: int, chunks_kept: int
) -> None:
    store = Store()
    with tempfile.TemporaryDirectory() as tmp:
        cache = ChunkCache(
            Path(tmp) / "c", store.fetch, capacity_bytes=chunk * chunks_kept, chunk_bytes=chunk
        )
        for key, position, length in reads:
            data = OBJECTS[key]
            assert (
                cache.read(key, len(data), position, length) == data[position : position + length]
            )
            stats = cache.statistics()
            assert stats.size_bytes <= cache.capacity_bytes
            on_disk = sum(p.stat().st_size for p in (Path(tmp) / "c").iterdir())
            assert on_disk == stats.size_bytes
        assert stats.misses == store.gets


def test_a_warm_read_costs_no_get_and_a_short_body_is_refused(tmp_path: Path) -> None:
    store = Store()
    cache = ChunkCache(tmp_path / "c", store.fetch, capacity_bytes=1 << 20, chunk_bytes=256)
    data = OBJECTS["k4"]
    assert cache.read("k4", len(data), 10, 1000) == data[10:1010]
    gets = store.gets
    assert cache.read("k4", len(data), 300, 500) == data[300:800]
    assert store.gets == gets
    store.truncate.add("k3")
    with pytest.raises(RemoteStorageError, match="truncated"):
        cache.read("k3", len(OBJECTS["k3"]), 0, 1000)
    assert cache.statistics().chunks == 4  # nothing of k3 was kept


def test_the_cache_is_wiped_when_it_opens(tmp_path: Path) -> None:
    store = Store()
    cache = ChunkCache(tmp_path / "c", store.fetch, capacity_bytes=1 << 20, chunk_bytes=256)
    cache.read("k4", 4096, 0, 4096)
    assert len(list((tmp_path / "c").iterdir())) == 16
    again = ChunkCache(tmp_path / "c", store.fetch, capacity_bytes=1 << 20, chunk_bytes=256)
    assert list((tmp_path / "c").iterdir()) == [] and again.statistics().size_bytes == 0
