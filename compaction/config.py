"""The cleaner's broker-level settings, with Kafka's names and defaults.

`CLEANER_SETTINGS` declares the `log.cleaner.*` keys (protocol/settings.py says
how to add one); the broker parses them with the rest of server.properties into
this frozen record, which carries them into the cleaner with units in every name
and derives the per-thread values the way Kafka's `CleanerConfig` and
`LogCleaner.CleanerThread` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from protocol.errors import InvalidConfig
from protocol.settings import DOUBLE_MAX, Setting, check_fields, settings_by_name

__all__ = ["CLEANER_SETTINGS", "CleanerConfig"]

# Kafka caps one thread's offset map at 2^31-1 bytes (a Java ByteBuffer limit); kept
# as the same bound on one numpy allocation.
MAX_MAP_BYTES_PER_THREAD = 2**31 - 1
# Kafka requires dedupe.buffer.size / threads > 1 MiB so a map holds a useful number
# of keys; tests may go lower through `min_map_bytes`.
MIN_MAP_BYTES_PER_THREAD = 1024 * 1024
# Smallest read/write chunk, so a tiny io.buffer.size cannot make a syscall per batch.
MIN_IO_CHUNK_BYTES = 64 * 1024


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be in (0, 1]"


# Broker keys (server.properties); how to add one: protocol/settings.py.
_C = "cleaner"  # section of server.properties and the docs

CLEANER_SETTINGS: tuple[Setting, ...] = (
    Setting("log.cleaner.enable", "enable", bool, True,
            "Run the log cleaner for topics with cleanup.policy=compact.", section=_C),
    Setting("log.cleaner.threads", "threads", int, 1,
            "Cleaner threads, each with its share of the offset-map memory.",
            low=0, section=_C),
    Setting("log.cleaner.dedupe.buffer.size", "dedupe_buffer_bytes", int, 134217728,
            "Offset-map memory shared by all cleaner threads.",
            low=MIN_MAP_BYTES_PER_THREAD, section=_C),
    Setting("log.cleaner.io.buffer.size", "io_buffer_bytes", int, 524288,
            "Cleaner read and write buffers (per thread: size / threads / 2, at least 64 KiB).",
            low=0, section=_C),
    Setting("log.cleaner.io.buffer.load.factor", "io_buffer_load_factor", float, 0.9,
            "Largest fill of an offset map, in (0, 1].",
            low=0, high=1, check=_positive, section=_C),
    Setting("log.cleaner.io.max.bytes.per.second", "io_max_bytes_per_second", float,
            DOUBLE_MAX, "Cleaner read+write throttle in bytes per second (default: unthrottled).",
            low=1, section=_C),
    Setting("log.cleaner.backoff.ms", "backoff_ms", int, 15000,
            "Cleaner sleep when no log needed cleaning.", low=0, section=_C),
)  # fmt: skip
CLEANER_CONFIG_DEFS: dict[str, Setting] = settings_by_name(CLEANER_SETTINGS)


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """`log.cleaner.*` settings (Kafka defaults); ValueError names the bad key."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_bytes: int = 134217728
    io_buffer_bytes: int = 524288
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15000
    min_map_bytes: int = MIN_MAP_BYTES_PER_THREAD  # a test knob, not a key

    def __post_init__(self) -> None:
        for row in CLEANER_SETTINGS:
            problem = row.problem(getattr(self, row.attr))
            # The dedupe floor is `min_map_bytes` (tests go lower), checked per thread below.
            if problem is not None and row.attr != "dedupe_buffer_bytes":
                raise ValueError(f"{row.name} {problem}, not {getattr(self, row.attr)}")
        if self.threads and self.dedupe_buffer_bytes / self.threads < self.min_map_bytes:
            raise ValueError(
                "log.cleaner.dedupe.buffer.size / log.cleaner.threads must be at least "
                f"{self.min_map_bytes} bytes"
            )

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> CleanerConfig:
        """Build from Kafka-named broker keys (missing keys keep their defaults).

        Raises InvalidConfig naming the key, as the broker's other keys do.
        """
        values = {
            row.attr: row.parse(props[row.name]) for row in CLEANER_SETTINGS if row.name in props
        }
        try:
            return cls(**values)
        except ValueError as exc:
            raise InvalidConfig(str(exc)) from exc

    @property
    def map_bytes_per_thread(self) -> int:
        """Offset-map memory of one cleaner thread."""
        return min(self.dedupe_buffer_bytes // max(self.threads, 1), MAX_MAP_BYTES_PER_THREAD)

    @property
    def io_chunk_bytes(self) -> int:
        """Read and write buffer of one thread (Kafka: io.buffer.size / threads / 2)."""
        return max(self.io_buffer_bytes // max(self.threads, 1) // 2, MIN_IO_CHUNK_BYTES)


check_fields(CleanerConfig, CLEANER_SETTINGS)
