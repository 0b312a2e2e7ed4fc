"""Tidelog's settings as Kafka's DescribeConfigs shows them: value text, source,
synonyms, type, read-only. Pure functions of the broker config and a topic's
native describe answer; checked against Apache Kafka 4.4 (interop/).

Kafka's rules, from `ConfigHelper` and `DynamicBrokerConfig`, restated:

- A topic key's synonyms are its topic override (DYNAMIC_TOPIC_CONFIG) if any,
  then the *primary* broker key's synonym group (e.g. `log.retention.ms`,
  `.minutes`, `.hours`): first every member set in server.properties
  (STATIC_BROKER_CONFIG), then every member with a non-null default
  (DEFAULT_CONFIG), each in group order; then everything before the first entry
  named after the primary key is dropped. So `retention.ms` of a default topic
  has no synonyms at all (only `log.retention.hours` has a default).
- A topic key's source is its first synonym's, or DEFAULT_CONFIG when none.
- A broker key's synonyms are the same walk over its own group, from itself.
- `configuration_keys` null or empty means every key (`ConfigHelper.describeConfigs`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from broker.config import BROKER_CONFIG_DEFS, BrokerConfig
from protocol.settings import INT32_MAX, Setting
from protocol.settings import config_text as settings_text
from storage.config import TOPIC_CONFIG_DEFS, TOPIC_SETTINGS

# DescribeConfigsResponse ConfigSource ids (Kafka's DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# ConfigType ids (DescribeConfigs v3+).
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
INT32_MIN = -(2**31)

# Broker keys Kafka declares with a null default: a later synonym supplies the value.
NULL_DEFAULT_BROKER_KEYS = frozenset(
    {
        "log.retention.ms",
        "log.retention.minutes",
        "log.roll.ms",
        "log.roll.jitter.ms",
        "log.flush.interval.ms",
        "advertised.listeners",  # null: the listeners' own addresses
    }
)


# Broker keys whose Kafka ConfigType our declaration does not imply: Kafka types these
# INT or LIST where Tidelog bounds them wider or keeps them as text (checked in interop/).
KAFKA_BROKER_TYPES: dict[str, int] = {
    "log.cleaner.io.buffer.size": INT,
    "log.cleaner.threads": INT,
    "log.flush.offset.checkpoint.interval.ms": INT,
    "log.flush.start.offset.checkpoint.interval.ms": INT,
    "socket.request.max.bytes": INT,
    "offsets.retention.minutes": INT,
    "group.min.session.timeout.ms": INT,
    "group.max.session.timeout.ms": INT,
    "group.initial.rebalance.delay.ms": INT,
    "group.max.size": INT,
    "producer.id.expiration.ms": INT,
    "max.connections.per.ip": INT,
    "node.id": INT,
    "advertised.listeners": LIST,
    "log.dirs": LIST,
    "log.dir": LIST,
}
# Java prints a double in plain notation only within [1e-3, 1e7) (Double.toString).
_JAVA_PLAIN_DOUBLES = (1e-3, 1e7)


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """One broker-level key: its name, Kafka type id, default text and synonym group."""

    name: str
    config_type: int
    default: str | None
    doc: str
    group: tuple[str, ...]  # Kafka's brokerConfigSynonyms(name): itself and its alternatives


def config_text(value: Any) -> str | None:
    """A value as Kafka writes it: `true`/`false`, numbers plainly, lists comma-joined."""
    if value is None:
        return None
    if isinstance(value, float):
        return java_double(value)
    return settings_text(sorted(value) if isinstance(value, list | tuple) else value)


def java_double(value: float) -> str:
    """A double as Java's Double.toString writes it: `0.5`, `1.0E7`, `1.7976931348623157E308`."""
    low, high = _JAVA_PLAIN_DOUBLES
    if value == 0 or low <= abs(value) < high or not math.isfinite(value):
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    mantissa = f"{text[0]}.{text[1:] or '0'}"
    return f"{'-' if sign else ''}{mantissa}E{int(exponent) + len(digits) - 1}"


def config_type(setting: Setting) -> int:
    """Kafka's ConfigType of a setting: int keys bounded to int32 are INT, others LONG."""
    if setting.type is bool:
        return BOOLEAN
    if setting.type is float:
        return DOUBLE
    if setting.type is frozenset:
        return LIST
    if setting.type is str:
        return STRING
    low, high = setting.bounds
    return INT if low >= INT32_MIN and high <= INT32_MAX else LONG


def _broker_keys() -> dict[str, BrokerKey]:
    """Every broker key: the topic keys' `log.*` synonyms, then the broker's own keys."""
    keys: dict[str, BrokerKey] = {}
    for topic_key in TOPIC_SETTINGS:
        group = tuple(s.name for s in topic_key.synonyms)
        for synonym in topic_key.synonyms:
            scaled = synonym.scale != 1
            default = None
            if synonym.name not in NULL_DEFAULT_BROKER_KEYS:
                default = config_text(
                    topic_key.default // synonym.scale if scaled else topic_key.default
                )
            keys[synonym.name] = BrokerKey(
                synonym.name,
                INT if scaled else config_type(topic_key),
                default,
                topic_key.doc,
                group,
            )
    for setting in BROKER_CONFIG_DEFS.values():
        keys[setting.name] = BrokerKey(
            setting.name,
            KAFKA_BROKER_TYPES.get(setting.name, config_type(setting)),
            None if setting.name in NULL_DEFAULT_BROKER_KEYS else config_text(setting.default),
            setting.doc,
            (setting.name,),
        )
    return keys


# Kafka 4 derives the inter-broker protocol from metadata.version and dropped this
# key; consoles (Kafbat UI) still read it to switch features, so it is shown, at the
# release whose metadata.version ApiVersions finalizes (4.4-IV2), read-only.
INTER_BROKER_PROTOCOL_VERSION = BrokerKey(
    "inter.broker.protocol.version",
    STRING,
    "4.4-IV2",
    "The inter-broker protocol version: Kafka 4.4's (metadata.version 4.4-IV2).",
    ("inter.broker.protocol.version",),
)
BROKER_KEYS: dict[str, BrokerKey] = {
    **_broker_keys(),
    INTER_BROKER_PROTOCOL_VERSION.name: INTER_BROKER_PROTOCOL_VERSION,
}


def broker_synonyms(config: BrokerConfig, name: str) -> list[dict[str, Any]]:
    """Kafka's `configSynonyms(name, brokerConfigSynonyms(name))` for a broker key."""
    group = BROKER_KEYS[name].group
    found = [_synonym(k, config.props[k], STATIC_BROKER_CONFIG) for k in group if k in config.props]
    found += [
        _synonym(k, BROKER_KEYS[k].default, DEFAULT_CONFIG)
        for k in group
        if BROKER_KEYS[k].default is not None
    ]
    while found and found[0]["name"] != name:
        found.pop(0)
    return found


def _synonym(name: str, value: str | None, source: int) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source}


def _entry(
    name: str,
    value: str | None,
    synonyms: list[dict[str, Any]],
    *,
    read_only: bool,
    kind: int,
    doc: str,
    include_synonyms: bool,
) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": synonyms[0]["source"] if synonyms else DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": kind,
        "documentation": doc,
    }


def topic_entries(
    config: BrokerConfig,
    native: Mapping[str, Mapping[str, Any]],
    keys: Iterable[str] | None,
    *,
    include_synonyms: bool,
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of a topic from the native `describe_configs` answer."""
    wanted = [k for k in keys if k in native] if keys else native.keys()
    out = []
    for name in wanted:
        setting = TOPIC_CONFIG_DEFS[name]
        value = config_text(native[name]["value"])
        synonyms = []
        if native[name]["source"] == "topic":
            synonyms.append(_synonym(name, value, DYNAMIC_TOPIC_CONFIG))
        if setting.synonyms:
            synonyms += broker_synonyms(config, setting.synonyms[0].name)
        out.append(
            _entry(
                name,
                value,
                synonyms,
                read_only=False,
                kind=config_type(setting),
                doc=setting.doc,
                include_synonyms=include_synonyms,
            )
        )
    return out


def broker_entries(
    config: BrokerConfig, keys: Iterable[str] | None, *, include_synonyms: bool
) -> list[dict[str, Any]]:
    """DescribeConfigs entries of this broker, or of the cluster-wide default (the same:
    one broker): every key with its source, read-only (none is dynamic)."""
    wanted = [k for k in keys if k in BROKER_KEYS] if keys else BROKER_KEYS.keys()
    out = []
    for name in wanted:
        key = BROKER_KEYS[name]
        synonyms = broker_synonyms(config, name)
        value = config.props.get(name, key.default)
        if name == "log.dirs":  # --data-dir wins over the key
            value = str(config.data_dir)
            synonyms = [_synonym(name, value, STATIC_BROKER_CONFIG)]
        out.append(
            _entry(
                name,
                value,
                synonyms,
                read_only=True,
                kind=key.config_type,
                doc=key.doc,
                include_synonyms=include_synonyms,
            )
        )
    return out
