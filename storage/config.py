"""Topic-level log configuration with Kafka's names, defaults and validators.

`TOPIC_CONFIG_DEFS` is the single table of topic keys (PROTOCOL.md §6,
KAFKA_SEMANTICS.md §1): for each, the python type, Kafka's default, a
validator, the broker-level synonyms (first wins, with a scale to the topic
key's unit, e.g. `log.retention.hours` x 3,600,000) and a doc line. The broker
builds its own config on top of it; `LogConfig` is the frozen, typed result
with units in every field name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from protocol.errors import InvalidConfig

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647
CLEANUP_POLICIES = frozenset({"delete", "compact"})
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class Synonym(NamedTuple):
    """A broker key that sets a topic key's default; value x scale = the topic key's unit."""

    name: str
    scale: int = 1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One topic-level key."""

    name: str  # Kafka's topic key
    attr: str  # LogConfig field
    type: type  # int, float, str, frozenset (comma list) or bool
    default: Any
    validator: Callable[[Any], str | None]  # returns why a value is invalid, or None
    synonyms: tuple[Synonym, ...]
    doc: str

    def parse(self, raw: object) -> Any:
        """Coerce `raw` (a str from a file or the wire, or a typed value) and validate it."""
        try:
            value = _coerce(self.type, raw)
        except (TypeError, ValueError) as exc:
            raise InvalidConfig(
                f"{self.name}: cannot parse {raw!r} as {self.type.__name__}"
            ) from exc
        problem = self.validator(value)
        if problem is not None:
            raise InvalidConfig(f"{self.name}: {raw!r} is invalid ({problem})")
        return value


def _coerce(kind: type, raw: object) -> Any:
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError(raw)
    if kind is int:
        if isinstance(raw, (bool, float)):
            raise TypeError(raw)
        return int(str(raw).strip()) if isinstance(raw, str) else int(raw)  # type: ignore[call-overload]
    if kind is float:
        if isinstance(raw, bool):
            raise TypeError(raw)
        return float(raw)  # type: ignore[arg-type]
    if kind is frozenset:
        items = raw.split(",") if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
        return frozenset(str(item).strip() for item in items if str(item).strip())
    if not isinstance(raw, str):
        raise TypeError(raw)
    return raw.strip()


def at_least(low: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be >= {low}"


def between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be in [{low}, {high}]"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def _valid_policy(value: frozenset[str]) -> str | None:
    if not value or not value <= CLEANUP_POLICIES:
        return "must be a non-empty subset of {compact, delete}"
    return None


def _any(_: Any) -> str | None:
    return None


_D = ConfigDef
_S = Synonym
_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

TOPIC_CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        _D("segment.bytes", "segment_bytes", int, 1073741824, between(14, INT_MAX),
           (_S("log.segment.bytes"),), "Roll a new segment when the active one would exceed this."),
        _D("segment.ms", "segment_ms", int, 604800000, at_least(1),
           (_S("log.roll.ms"), _S("log.roll.hours", _HOUR_MS)),
           "Roll a new segment once its first record is this old (record time)."),
        _D("segment.jitter.ms", "segment_jitter_ms", int, 0, at_least(0),
           (_S("log.roll.jitter.ms"), _S("log.roll.jitter.hours", _HOUR_MS)),
           "Subtract a random 0..jitter-1 ms per segment from segment.ms to spread rolls."),
        _D("segment.index.bytes", "segment_index_bytes", int, 10485760, between(4, INT_MAX),
           (_S("log.index.size.max.bytes"),), "Preallocated size of each offset and time index."),
        _D("index.interval.bytes", "index_interval_bytes", int, 4096, between(0, INT_MAX),
           (_S("log.index.interval.bytes"),), "Log bytes between two index entries."),
        _D("retention.ms", "retention_ms", int, 604800000, at_least(-1),
           (_S("log.retention.ms"), _S("log.retention.minutes", _MINUTE_MS),
            _S("log.retention.hours", _HOUR_MS)),
           "Delete segments whose newest record is older than this; -1 keeps them forever."),
        _D("retention.bytes", "retention_bytes", int, -1, _any,
           (_S("log.retention.bytes"),), "Delete old segments while the log exceeds this; <0 off."),
        _D("file.delete.delay.ms", "file_delete_delay_ms", int, 60000, at_least(0),
           (_S("log.segment.delete.delay.ms"),), "Delay between rename to .deleted and unlink."),
        _D("flush.messages", "flush_messages", int, LONG_MAX, at_least(1),
           (_S("log.flush.interval.messages"),), "fsync once this many records are unflushed."),
        _D("flush.ms", "flush_ms", int, LONG_MAX, at_least(0),
           (_S("log.flush.interval.ms"),), "fsync when the last flush is this old."),
        _D("cleanup.policy", "cleanup_policy", frozenset, frozenset({"delete"}), _valid_policy,
           (_S("log.cleanup.policy"),), "delete, compact, or compact,delete."),
        _D("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", float, 0.5, between(0, 1),
           (_S("log.cleaner.min.cleanable.ratio"),), "Clean when dirty/total exceeds this."),
        _D("min.compaction.lag.ms", "min_compaction_lag_ms", int, 0, at_least(0),
           (_S("log.cleaner.min.compaction.lag.ms"),), "Records younger than this stay dirty."),
        _D("max.compaction.lag.ms", "max_compaction_lag_ms", int, LONG_MAX, at_least(1),
           (_S("log.cleaner.max.compaction.lag.ms"),), "Force cleaning of records this old."),
        _D("delete.retention.ms", "delete_retention_ms", int, 86400000, at_least(0),
           (_S("log.cleaner.delete.retention.ms"),), "How long tombstones survive cleaning."),
        _D("max.message.bytes", "max_message_bytes", int, 1048588, between(0, INT_MAX),
           (_S("message.max.bytes"),), "Largest batch accepted, 12-byte log overhead included."),
        _D("message.timestamp.type", "message_timestamp_type", str, "CreateTime",
           one_of(*TIMESTAMP_TYPES), (_S("log.message.timestamp.type"),),
           "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's."),
        _D("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", int, LONG_MAX,
           at_least(0), (_S("log.message.timestamp.before.max.ms"),),
           "Reject CreateTime batches whose first timestamp is older than now minus this."),
        _D("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", int, LONG_MAX,
           at_least(0), (_S("log.message.timestamp.after.max.ms"),),
           "Reject CreateTime batches whose max timestamp is later than now plus this."),
    )
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Validated topic-level settings, one field per TOPIC_CONFIG_DEFS entry."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        for definition in TOPIC_CONFIG_DEFS.values():
            definition.parse(getattr(self, definition.attr))
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise InvalidConfig(
                "max.compaction.lag.ms must be >= min.compaction.lag.ms "
                f"({self.max_compaction_lag_ms} < {self.min_compaction_lag_ms})"
            )

    @classmethod
    def from_props(
        cls, overrides: Mapping[str, object], defaults: LogConfig | None = None
    ) -> LogConfig:
        """Apply Kafka-named overrides to `defaults`; InvalidConfig names the bad key."""
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            definition = TOPIC_CONFIG_DEFS.get(name)
            if definition is None:
                raise InvalidConfig(f"unknown topic config {name!r}")
            changes[definition.attr] = definition.parse(raw)
        return replace(defaults or cls(), **changes)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> LogConfig:
        """Topic defaults from broker keys via the synonyms (first present wins, scaled).

        Broker keys that are not synonyms are ignored here (the broker validates
        its own keys). Any negative `log.retention.*` becomes -1, as in Kafka.
        """
        changes: dict[str, Any] = {}
        for definition in TOPIC_CONFIG_DEFS.values():
            for synonym in definition.synonyms:
                if synonym.name not in props:
                    continue
                raw = props[synonym.name]
                if synonym.scale != 1:
                    try:
                        raw = _coerce(int, raw) * synonym.scale
                    except (TypeError, ValueError) as exc:
                        raise InvalidConfig(f"{synonym.name}: cannot parse {raw!r}") from exc
                if definition.name == "retention.ms" and _coerce(int, raw) < 0:
                    raw = -1
                try:
                    changes[definition.attr] = definition.parse(raw)
                except InvalidConfig as exc:
                    raise InvalidConfig(f"{synonym.name}: {exc.message}") from exc
                break
        return replace(cls(), **changes)

    def to_props(self) -> dict[str, object]:
        """Kafka name -> value (lists joined with commas, sorted), for describe_configs."""
        props: dict[str, object] = {}
        for definition in TOPIC_CONFIG_DEFS.values():
            value = getattr(self, definition.attr)
            props[definition.name] = (
                ",".join(sorted(value)) if isinstance(value, frozenset) else value
            )
        return props

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_segment_ms(self) -> int:
        """Kafka's maxSegmentMs: compacted logs also roll by max.compaction.lag.ms."""
        if self.compacted:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms


assert {f.name for f in fields(LogConfig)} == {d.attr for d in TOPIC_CONFIG_DEFS.values()}
