"""Differential comparison of what clients observed on two targets.

`normalise` removes what legitimately differs between two correct brokers (or two runs
on one broker) and keeps everything a client could rely on:

- topic and group names (each run uses its own) become `<topic>` / `<group>`;
- a broker-assigned timestamp (LogAppendTime) becomes `<broker clock>`;
- a create-time timestamp the producer did not choose (kcat stamps its own clock)
  becomes `<producer clock>`; the explicit sample timestamps are kept exactly.

`differences(a, b)` then lists every remaining difference as a path and both values,
empty when the two observations agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from interop.observed import LOG_APPEND_TIME, SAMPLES

BROKER_CLOCK = "<broker clock>"
PRODUCER_CLOCK = "<producer clock>"
SAMPLE_TIMESTAMPS = frozenset(s.timestamp_ms for s in SAMPLES)


def normalise(observed: Any, names: Mapping[str, str]) -> Any:
    """A copy of `observed` with run-specific names replaced by their placeholders
    (`names`: actual -> placeholder, e.g. {"t-123": "<topic>"}) and clocks masked."""
    if isinstance(observed, Mapping):
        if "timestamp_type" in observed and "timestamp_ms" in observed:
            observed = {**observed, "timestamp_ms": _timestamp(observed)}
        return {normalise(k, names): normalise(v, names) for k, v in observed.items()}
    if isinstance(observed, list | tuple):
        items = [normalise(v, names) for v in observed]
        return items if isinstance(observed, list) else tuple(items)
    if isinstance(observed, str):
        return names.get(observed, observed)
    return observed


def _timestamp(record: Mapping[str, Any]) -> Any:
    if record["timestamp_type"] == LOG_APPEND_TIME:
        return BROKER_CLOCK
    if record["timestamp_ms"] not in SAMPLE_TIMESTAMPS:
        return PRODUCER_CLOCK
    return record["timestamp_ms"]


def differences(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Every place where two normalised observations differ, as readable lines."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return [
            line
            for key in _ordered(set(expected) | set(actual))
            for line in _child(expected, actual, key, f"{path}.{key}")
        ]
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} items != {len(actual)} items"]
        return [
            line
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for line in differences(e, a, f"{path}[{i}]")
        ]
    return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]


def _child(
    expected: Mapping[Any, Any], actual: Mapping[Any, Any], key: Any, path: str
) -> list[str]:
    if key not in actual:
        return [f"{path}: missing on the second target"]
    if key not in expected:
        return [f"{path}: only on the second target"]
    return differences(expected[key], actual[key], path)


def _ordered(keys: Iterable[Any]) -> list[Any]:
    return sorted(keys, key=lambda k: (type(k).__name__, str(k)))


def compare_runs(
    first: Any, first_names: Mapping[str, str], second: Any, second_names: Mapping[str, str]
) -> list[str]:
    """Normalise two runs of one scenario (each with its own names) and diff them."""
    return differences(normalise(first, first_names), normalise(second, second_names))
