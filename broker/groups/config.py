"""The group coordinator's settings, by Kafka's broker key names, with Kafka's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from protocol.errors import InvalidConfig

# Kafka's group.max.size default is Integer.MAX_VALUE; a bound keeps one group's
# state (members, their metadata) from growing without limit.
GROUP_MAX_SIZE_DEFAULT = 1000

_KEYS = {
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.max.size": "group_max_size",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Validated at construction; units last in every name."""

    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = GROUP_MAX_SIZE_DEFAULT
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidConfig(f"{_key_of(field.name)}: {value!r} is not an integer")
        if self.group_min_session_timeout_ms < 0:
            raise InvalidConfig("group.min.session.timeout.ms: must be >= 0")
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise InvalidConfig(
                "group.max.session.timeout.ms: must be >= group.min.session.timeout.ms"
            )
        if self.group_initial_rebalance_delay_ms < 0:
            raise InvalidConfig("group.initial.rebalance.delay.ms: must be >= 0")
        if self.group_max_size < 1:
            raise InvalidConfig("group.max.size: must be >= 1")
        if self.offsets_retention_minutes < 1:
            raise InvalidConfig("offsets.retention.minutes: must be >= 1")
        if self.offsets_retention_check_interval_ms < 1:
            raise InvalidConfig("offsets.retention.check.interval.ms: must be >= 1")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, properties: Mapping[str, str | int]) -> GroupConfig:
        """Build from Kafka key names (`group.max.size` ...); unknown keys are refused."""
        values: dict[str, int] = {}
        for key, raw in properties.items():
            if key not in _KEYS:
                raise InvalidConfig(f"{key}: not a group coordinator setting")
            try:
                values[_KEYS[key]] = int(raw)
            except (TypeError, ValueError):
                raise InvalidConfig(f"{key}: {raw!r} is not an integer") from None
        return cls(**values)


def _key_of(field_name: str) -> str:
    return next(k for k, v in _KEYS.items() if v == field_name)
