"""Topic-level log configuration with Kafka's names, defaults and validators.

`TOPIC_SETTINGS` declares the topic keys (docs/protocol.md §6, docs/operations.md
"Configuration reference") as `protocol.settings.Setting` rows (how to add one: that module's
docstring): the python type, Kafka's default, bounds, the broker-level synonyms (first wins, with a
scale to the topic key's unit, e.g. `log.retention.hours` x 3,600,000) and a doc
line. `TOPIC_CONFIG_DEFS` is the same table keyed by name. The broker builds its own
config on top of it; `LogConfig` is the frozen, typed result with units in every
field name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from protocol.errors import InvalidConfig
from protocol.settings import (
    INT32_MAX,
    INT64_MAX,
    Setting,
    Synonym,
    check_fields,
    coerce,
    settings_by_name,
)

__all__ = [
    "COMPACTED_REMOTE_MESSAGE",
    "FOLLOW_RETENTION",
    "INT_MAX",
    "LONG_MAX",
    "REMOTE_DISABLED_MESSAGE",
    "REMOTE_TURN_OFF_MESSAGE",
    "TOPIC_CONFIG_DEFS",
    "LogConfig",
    "Synonym",
]

LONG_MAX = INT64_MAX
INT_MAX = INT32_MAX
CLEANUP_POLICIES = frozenset({"delete", "compact"})
# local.retention.* = -2: use retention.* (Kafka's DEFAULT_LOCAL_RETENTION_MS/BYTES).
FOLLOW_RETENTION = -2
# Kafka's message (LogConfig.validateNoRemoteStorageForCompactedTopic), with the topic key.
COMPACTED_REMOTE_MESSAGE = (
    "remote.storage.enable: Remote log storage is unsupported for the compacted topics "
    "(cleanup.policy contains compact): compaction rewrites segments, and uploaded ones "
    "cannot be rewritten"
)
# Kafka's messages (LogConfig.validateRemoteStorageOnlyIfSystemEnabled, ...TurningOff...).
REMOTE_DISABLED_MESSAGE = (
    "remote.storage.enable: Tiered Storage functionality is disabled in the broker "
    "(remote.log.storage.system.enable=false). Topic cannot be configured with remote log storage."
)
REMOTE_TURN_OFF_MESSAGE = (
    "remote.storage.enable: It is invalid to disable remote storage of a topic that has it: "
    "its older records may live only in the object store (Tidelog has no "
    "remote.log.delete.on.disable yet)."
)
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _valid_policy(value: frozenset[str]) -> str | None:
    if not value or not value <= CLEANUP_POLICIES:
        return "must be a non-empty subset of {compact, delete}"
    return None


_S = Synonym
_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

# Topic keys (docs/protocol.md §6). An int key without `high` is bounded by int64, the
# range describe_configs encodes it in; `section` places its synonyms in server.properties.
TOPIC_SETTINGS: tuple[Setting, ...] = (
    Setting("segment.bytes", "segment_bytes", int, 1073741824,
            "Roll a new segment when the active one would exceed this.",
            low=14, high=INT_MAX, synonyms=(_S("log.segment.bytes"),), section="segments"),
    Setting("segment.ms", "segment_ms", int, 604800000,
            "Roll a new segment once its first record is this old (record time).",
            low=1, synonyms=(_S("log.roll.ms"), _S("log.roll.hours", _HOUR_MS)),
            section="segments"),
    Setting("segment.jitter.ms", "segment_jitter_ms", int, 0,
            "Subtract a random 0..jitter-1 ms per segment from segment.ms to spread rolls.",
            low=0, synonyms=(_S("log.roll.jitter.ms"), _S("log.roll.jitter.hours", _HOUR_MS)),
            section="segments"),
    Setting("segment.index.bytes", "segment_index_bytes", int, 10485760,
            "Preallocated size of each offset and time index.",
            low=4, high=INT_MAX, synonyms=(_S("log.index.size.max.bytes"),), section="segments"),
    Setting("index.interval.bytes", "index_interval_bytes", int, 4096,
            "Log bytes between two index entries.",
            low=0, high=INT_MAX, synonyms=(_S("log.index.interval.bytes"),), section="segments"),
    Setting("retention.ms", "retention_ms", int, 604800000,
            "Delete segments whose newest record is older than this; -1 keeps them forever.",
            low=-1, synonyms=(_S("log.retention.ms"), _S("log.retention.minutes", _MINUTE_MS),
                              _S("log.retention.hours", _HOUR_MS)), section="retention"),
    Setting("retention.bytes", "retention_bytes", int, -1,
            "Delete old segments while the log exceeds this; <0 off.",
            synonyms=(_S("log.retention.bytes"),), section="retention"),
    # Tiered storage (KIP-405, docs/retention.md "Tiered topics"): Kafka's names and checks.
    Setting("remote.storage.enable", "remote_storage_enable", bool, False,
            "Copy rolled segments to the object store (needs remote.log.storage.system.enable; "
            "not for compacted topics).", section="retention"),
    Setting("local.retention.ms", "local_retention_ms", int, FOLLOW_RETENTION,
            "With remote.storage.enable: delete local copies of uploaded segments whose newest "
            "record is older than this; -2 follows retention.ms, -1 keeps them.",
            low=-2, synonyms=(_S("log.local.retention.ms"),), section="retention"),
    Setting("local.retention.bytes", "local_retention_bytes", int, FOLLOW_RETENTION,
            "With remote.storage.enable: delete local copies of uploaded segments while the "
            "local log exceeds this; -2 follows retention.bytes, -1 keeps them.",
            low=-2, synonyms=(_S("log.local.retention.bytes"),), section="retention"),
    Setting("file.delete.delay.ms", "file_delete_delay_ms", int, 60000,
            "Delay between rename to .deleted and unlink.",
            low=0, synonyms=(_S("log.segment.delete.delay.ms"),), section="retention"),
    Setting("flush.messages", "flush_messages", int, LONG_MAX,
            "fsync once this many records are unflushed.",
            low=1, synonyms=(_S("log.flush.interval.messages"),), section="flush"),
    Setting("flush.ms", "flush_ms", int, LONG_MAX,
            "fsync when the last flush is this old.",
            low=0, synonyms=(_S("log.flush.interval.ms"),), section="flush"),
    Setting("cleanup.policy", "cleanup_policy", frozenset, frozenset({"delete"}),
            "delete, compact, or compact,delete (compact turns the cleaner on for the topic).",
            check=_valid_policy, synonyms=(_S("log.cleanup.policy"),), section="retention"),
    Setting("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", float, 0.5,
            "Clean a log when its dirty bytes / total bytes are strictly above this.",
            low=0, high=1, synonyms=(_S("log.cleaner.min.cleanable.ratio"),), section="cleaner"),
    Setting("min.compaction.lag.ms", "min_compaction_lag_ms", int, 0,
            "Records younger than this (by their segment's largest timestamp) stay uncompacted.",
            low=0, synonyms=(_S("log.cleaner.min.compaction.lag.ms"),), section="cleaner"),
    Setting("max.compaction.lag.ms", "max_compaction_lag_ms", int, LONG_MAX,
            "Force a cleaning when dirty records are this old; compacted logs also roll at it.",
            low=1, synonyms=(_S("log.cleaner.max.compaction.lag.ms"),), section="cleaner"),
    Setting("delete.retention.ms", "delete_retention_ms", int, 86400000,
            "How long a kept tombstone survives, from its first cleaning.",
            low=0, synonyms=(_S("log.cleaner.delete.retention.ms"),), section="cleaner"),
    Setting("max.message.bytes", "max_message_bytes", int, 1048588,
            "Largest batch accepted, 12-byte log overhead included.",
            low=0, high=INT_MAX, synonyms=(_S("message.max.bytes"),), section="segments"),
    Setting("message.timestamp.type", "message_timestamp_type", str, "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
            choices=TIMESTAMP_TYPES, synonyms=(_S("log.message.timestamp.type"),),
            section="segments"),
    Setting("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", int, LONG_MAX,
            "Reject CreateTime batches whose first timestamp is older than now minus this.",
            low=0, synonyms=(_S("log.message.timestamp.before.max.ms"),), section="segments"),
    Setting("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", int, LONG_MAX,
            "Reject CreateTime batches whose max timestamp is later than now plus this.",
            low=0, synonyms=(_S("log.message.timestamp.after.max.ms"),), section="segments"),
    # Kafka has this as a broker key only; Tidelog also takes it per topic (a topic row
    # whose broker synonym is the same name) so it reaches each log with its config.
    Setting("producer.id.expiration.ms", "producer_id_expiration_ms", int, 86400000,
            "Forget an idempotent producer whose newest batch is this old (by its timestamp).",
            low=1, high=INT_MAX, synonyms=(_S("producer.id.expiration.ms"),),
            section="producers"),
)  # fmt: skip
TOPIC_CONFIG_DEFS: dict[str, Setting] = settings_by_name(TOPIC_SETTINGS)


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
    remote_storage_enable: bool = False
    local_retention_ms: int = FOLLOW_RETENTION
    local_retention_bytes: int = FOLLOW_RETENTION
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
    producer_id_expiration_ms: int = 86400000

    def __post_init__(self) -> None:
        for definition in TOPIC_CONFIG_DEFS.values():
            definition.parse(getattr(self, definition.attr))
        if self.max_compaction_lag_ms < self.min_compaction_lag_ms:
            raise InvalidConfig(
                "max.compaction.lag.ms must be >= min.compaction.lag.ms "
                f"({self.max_compaction_lag_ms} < {self.min_compaction_lag_ms})"
            )
        if self.remote_storage_enable:
            self._check_remote_storage()

    def _check_remote_storage(self) -> None:
        """Kafka's checks of a tiered topic (LogConfig.validateTopicLogConfigValues)."""
        if self.compacted:
            raise InvalidConfig(COMPACTED_REMOTE_MESSAGE)
        pairs = (("ms", self.retention_ms, self.local_retention_ms),
                 ("bytes", self.retention_bytes, self.local_retention_bytes))  # fmt: skip
        for unit, total, local in pairs:
            if total < 0 or local == FOLLOW_RETENTION:
                continue  # retention.* unlimited, or local.* follows it
            if local == -1:
                raise InvalidConfig(
                    f"local.retention.{unit}: Value must not be -1 as retention.{unit} "
                    f"value is set as {total}."
                )
            if local > total:
                raise InvalidConfig(
                    f"local.retention.{unit}: Value must not be more than retention.{unit} "
                    f"property value: {total}"
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
                if synonym.scale != 1 or definition.name == "retention.ms":
                    try:
                        raw = coerce(int, raw) * synonym.scale
                    except (TypeError, ValueError) as exc:
                        raise InvalidConfig(f"{synonym.name}: cannot parse {raw!r}") from exc
                if definition.name == "retention.ms" and raw < 0:  # type: ignore[operator]
                    raw = -1
                try:
                    changes[definition.attr] = definition.parse(raw)
                except InvalidConfig as exc:
                    raise InvalidConfig(f"{synonym.name}: {exc.message}") from exc
                break
        return replace(cls(), **changes)

    def to_props(self) -> dict[str, str | int | float | None]:
        """Kafka name -> value (lists joined with commas, sorted), for describe_configs."""
        return {d.name: d.wire(getattr(self, d.attr)) for d in TOPIC_SETTINGS}

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def effective_local_retention_ms(self) -> int:
        """local.retention.ms with -2 resolved to retention.ms (Kafka's localRetentionMs())."""
        if self.local_retention_ms == FOLLOW_RETENTION:
            return self.retention_ms
        return self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """local.retention.bytes with -2 resolved to retention.bytes."""
        if self.local_retention_bytes == FOLLOW_RETENTION:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def max_segment_ms(self) -> int:
        """Kafka's maxSegmentMs: compacted logs also roll by max.compaction.lag.ms."""
        if self.compacted:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms


check_fields(LogConfig, TOPIC_SETTINGS)
assert len(LogConfig.__dataclass_fields__) == len(TOPIC_SETTINGS)
