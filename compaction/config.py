"""The cleaner's broker-level settings, with Kafka's names and defaults.

The broker validates its own keys; this frozen record carries them into the
cleaner with units in every name, and derives the per-thread values the way
Kafka's `CleanerConfig` and `LogCleaner.CleanerThread` do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CleanerConfig"]

# Kafka caps one thread's offset map at 2^31-1 bytes (a Java ByteBuffer limit); kept
# as the same bound on one numpy allocation.
MAX_MAP_BYTES_PER_THREAD = 2**31 - 1
# Kafka requires dedupe.buffer.size / threads > 1 MiB so a map holds a useful number
# of keys; tests may go lower through `min_map_bytes`.
MIN_MAP_BYTES_PER_THREAD = 1024 * 1024
# Smallest read/write chunk, so a tiny io.buffer.size cannot make a syscall per batch.
MIN_IO_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """`log.cleaner.*` settings (Kafka defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_bytes: int = 134217728
    io_buffer_bytes: int = 524288
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = math.inf
    backoff_ms: int = 15000
    min_map_bytes: int = MIN_MAP_BYTES_PER_THREAD

    def __post_init__(self) -> None:
        if self.threads < 0:
            raise ValueError(f"log.cleaner.threads must be >= 0, not {self.threads}")
        if self.threads and self.dedupe_buffer_bytes / self.threads < self.min_map_bytes:
            raise ValueError(
                "log.cleaner.dedupe.buffer.size / log.cleaner.threads must be at least "
                f"{self.min_map_bytes} bytes"
            )
        if not 0.0 < self.io_buffer_load_factor <= 1.0:
            raise ValueError(
                "log.cleaner.io.buffer.load.factor must be in (0, 1], "
                f"not {self.io_buffer_load_factor}"
            )
        if self.backoff_ms < 0:
            raise ValueError(f"log.cleaner.backoff.ms must be >= 0, not {self.backoff_ms}")

    @classmethod
    def from_props(cls, props: dict[str, object]) -> CleanerConfig:
        """Build from Kafka-named broker keys (missing keys keep their defaults)."""
        names = {
            "log.cleaner.enable": ("enable", _bool),
            "log.cleaner.threads": ("threads", int),
            "log.cleaner.dedupe.buffer.size": ("dedupe_buffer_bytes", int),
            "log.cleaner.io.buffer.size": ("io_buffer_bytes", int),
            "log.cleaner.io.buffer.load.factor": ("io_buffer_load_factor", float),
            "log.cleaner.io.max.bytes.per.second": ("io_max_bytes_per_second", float),
            "log.cleaner.backoff.ms": ("backoff_ms", int),
        }
        values = {}
        for key, (attr, kind) in names.items():
            if key in props:
                values[attr] = kind(props[key])
        return cls(**values)

    @property
    def map_bytes_per_thread(self) -> int:
        """Offset-map memory of one cleaner thread."""
        return min(self.dedupe_buffer_bytes // max(self.threads, 1), MAX_MAP_BYTES_PER_THREAD)

    @property
    def io_chunk_bytes(self) -> int:
        """Read and write buffer of one thread (Kafka: io.buffer.size / threads / 2)."""
        return max(self.io_buffer_bytes // max(self.threads, 1) // 2, MIN_IO_CHUNK_BYTES)


def _bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)
