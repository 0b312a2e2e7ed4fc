"""Read-only shared maps of index files that keep no file descriptor.

CPython's `mmap.mmap` duplicates the descriptor it maps and keeps it for the
map's life (until Python 3.13's `trackfd=False`): one descriptor per index map,
which capped a broker near 4,000 partitions (issue 34, item 7). The kernel needs
no descriptor once a file is mapped, so this module calls mmap(2) itself and
closes nothing but what its caller opened. The map is unmapped when the last
numpy view of it goes away, so a reader holding a view never sees it vanish.

Each map still counts against `vm.max_map_count`; `storage.fdcache.MAPS` bounds
how many storage keeps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import weakref

import numpy as np

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def map_readonly(fd: int, length: int, dtype: np.dtype) -> np.ndarray:
    """The first `length // dtype.itemsize` entries of the file `fd`, mapped shared and
    read-only; `fd` may be closed right after (the map does not need it)."""
    count = length // dtype.itemsize
    if count == 0:
        return np.zeros(0, dtype=dtype)
    size = count * dtype.itemsize
    address = _mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        raise OSError(code, f"mmap of {size} bytes failed: {os.strerror(code)}")
    buffer = (ctypes.c_char * size).from_address(address)
    weakref.finalize(buffer, _munmap, address, size)
    array: np.ndarray = np.frombuffer(memoryview(buffer), dtype=dtype, count=count)
    return array
