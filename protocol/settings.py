"""Declared settings: one row per key, from which parsing, describe and the docs come.

Every configurable component (topic keys in `storage/config.py`, broker keys in
`broker/config.py`, the cleaner's in `compaction/config.py`, the Spark source and
sink options in `spark_connector/options.py`) lists its keys as `Setting` rows: Kafka's
name, the field of the frozen record it fills (units last), its type, default, bounds
and a one-line doc. From those rows come the parsing and validation, the values
`describe_configs` answers, `deploy/server.properties` and the docs' config tables
(`deploy/build_settings.py` renders them; a test fails when a committed file differs).

Bounds are also the wire's bounds: an `int` setting without explicit bounds is held
to int64, the range `describe_configs` encodes it in (issue 23 finding 3: a stored
value must always be describable).

How to add a setting:

1. Add a `Setting(...)` row to the component's table (e.g. `BROKER_SETTINGS`):
   `Setting("queued.max.request.bytes", "queued_max_request_bytes", int, 500 * 2**20,
   "Memory for requests queued across connections.", low=1, section="connections")`.
   `choices=` lists allowed strings; `check=` takes a function for a rule bounds cannot
   say (it returns why a value is invalid, or None); `synonyms=` only for topic keys
   (their broker-level `log.*` keys); `default_text=` when the docs must say more than
   the value (e.g. "required").
2. Add the field, with the same default, to the component's frozen record; an
   import-time assert in each config module checks that rows and fields agree.
3. Run `python deploy/build_settings.py` to regenerate the properties file and tables.

This module is pure (no I/O) and sits in `protocol/` so every layer, including the
Spark connector, can import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass
from typing import Any, NamedTuple

from protocol.errors import InvalidConfig

__all__ = [
    "DOUBLE_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "Setting",
    "Synonym",
    "check_fields",
    "coerce",
    "markdown_table",
    "settings_by_name",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1  # Kafka's Long.MAX_VALUE: "never" / "no limit"
INT32_MAX = 2**31 - 1
DOUBLE_MAX = 1.7976931348623157e308  # Kafka's Double.MAX_VALUE: "unthrottled"

Check = Callable[[Any], str | None]
_TYPES = (int, float, bool, str, frozenset)


class Synonym(NamedTuple):
    """A broker key that sets a topic key's default; value x scale = the topic key's unit."""

    name: str
    scale: int = 1


@dataclass(frozen=True, slots=True)
class Setting:
    """One key. `type` is int, float, bool, str or frozenset (a comma-separated list)."""

    name: str  # Kafka's key, as users write it
    attr: str  # the frozen record's field
    type: type
    default: Any
    doc: str
    low: float | None = None  # inclusive; an int setting defaults to int64's bounds
    high: float | None = None
    choices: tuple[str, ...] = ()
    check: Check | None = None  # a rule bounds cannot say
    synonyms: tuple[Synonym, ...] = ()
    section: str = ""  # groups keys in generated files
    default_text: str = ""  # the docs' default when the value alone would mislead

    def __post_init__(self) -> None:
        assert self.type in _TYPES, f"{self.name}: unsupported type {self.type}"
        if self.type is int:
            assert INT64_MIN <= self.bounds[0] <= self.bounds[1] <= INT64_MAX, self.name

    @property
    def bounds(self) -> tuple[float, float]:
        """The inclusive valid range (int: within int64, the range it is encoded in)."""
        if self.type is int:
            low = INT64_MIN if self.low is None else self.low
            high = INT64_MAX if self.high is None else self.high
            return low, high
        return (
            -math.inf if self.low is None else self.low,
            math.inf if self.high is None else self.high,
        )

    def range_text(self) -> str:
        """The valid range as users read it: `in [1, 9223372036854775807]` or `>= 1`."""
        low, high = self.bounds
        if high == math.inf:
            return f">= {_number(low)}"
        return f"in [{_number(low)}, {_number(high)}]"

    def problem(self, value: Any) -> str | None:
        """Why a coerced value is invalid, or None."""
        if self.type in (int, float):
            low, high = self.bounds
            if not low <= value <= high:  # also refuses NaN
                return f"must be {self.range_text()}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        return self.check(value) if self.check is not None else None

    def parse(self, raw: object) -> Any:
        """Coerce `raw` (text from a file or the wire, or a typed value) and validate it.

        InvalidConfig names the key, the value and, for numbers, the valid range.
        """
        try:
            value = coerce(self.type, raw)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidConfig(
                f"{self.name}: cannot parse {raw!r} as {self.type.__name__}"
            ) from exc
        problem = self.problem(value)
        if problem is not None:
            raise InvalidConfig(f"{self.name}: {raw!r} is invalid ({problem})")
        return value

    def text(self, value: Any) -> str:
        """A value in the properties-file form that `parse` reads back."""
        return config_text(value)

    def wire(self, value: Any) -> str | int | float | None:
        """A value as describe_configs sends it: lists as sorted comma text, scalars as is."""
        return ",".join(sorted(value)) if isinstance(value, frozenset) else value


def config_text(value: object) -> str:
    """A config value in Kafka's text form, the one every config path writes: `true`
    and `false`, numbers plainly, a set sorted and a list in order, comma-joined."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, set | frozenset):
        return ",".join(sorted(str(item) for item in value))
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def coerce(kind: type, raw: object) -> Any:
    """Kafka's text forms to a python value; a bool is never a number, a float never an int."""
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ValueError(raw)
    if kind is int:
        if isinstance(raw, bool | float):
            raise TypeError(raw)
        return int(raw.strip()) if isinstance(raw, str) else int(raw)  # type: ignore[call-overload]
    if kind is float:
        if isinstance(raw, bool):
            raise TypeError(raw)
        return float(raw.strip()) if isinstance(raw, str) else float(raw)  # type: ignore[arg-type]
    if kind is frozenset:
        items = raw.split(",") if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
        return frozenset(str(item).strip() for item in items if str(item).strip())
    if not isinstance(raw, str):
        raise TypeError(raw)
    return raw.strip()


def settings_by_name(rows: Iterable[Setting]) -> dict[str, Setting]:
    """A table keyed by Kafka name; a name declared twice is a bug."""
    table: dict[str, Setting] = {}
    for row in rows:
        assert row.name not in table, f"setting {row.name} declared twice"
        table[row.name] = row
    return table


def check_fields(record: type, rows: Iterable[Setting]) -> None:
    """Assert that a frozen record's field defaults are the rows' defaults (import time).

    Rows with no `attr` fill no field directly; fields with no default are required
    arguments of the record, so only their existence is checked.
    """
    fields = record.__dataclass_fields__  # type: ignore[attr-defined]
    for row in rows:
        if not row.attr:
            continue
        assert row.attr in fields, f"{record.__name__} has no field {row.attr} for {row.name}"
        default = fields[row.attr].default
        if default is not MISSING:
            assert default == row.default, f"{row.name}: default differs from the field"


def markdown_table(
    rows: Iterable[Setting],
    *,
    header: tuple[str, str, str, str] = ("key", "default", "valid values", "meaning"),
    note: Callable[[Setting], str] | None = None,
) -> str:
    """A Markdown table of `rows`: key, default, valid values, doc (plus `note(row)`)."""
    lines = [f"| {' | '.join(header)} |", "|---|---|---|---|"]
    for row in rows:
        default = _default_text(row)
        doc = (f"{row.doc} {note(row)}" if note else row.doc).replace("|", "\\|")
        cells = (f"`{row.name}`", default, _valid_text(row), doc)
        lines.append("|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|")
    return "\n".join(lines) + "\n"


def _default_text(row: Setting) -> str:
    if row.default_text:
        return row.default_text
    if row.default is None or row.default == "":
        return ""
    return f"`{row.text(row.default)}`"


def _valid_text(row: Setting) -> str:
    if row.choices:
        return ", ".join(f"`{c}`" for c in row.choices)
    if row.type in (int, float):
        return row.range_text().removeprefix("in ")
    if row.type is bool:
        return "`true`, `false`"
    return ""
