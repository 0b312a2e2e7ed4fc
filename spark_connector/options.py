"""Options of the `tidelog` format: Kafka's names, precedence and error messages.

Spark hands options over lower-cased and as strings, and shows a Python exception's
message verbatim, so every check here raises `OptionError` with a message that names
the option the way the Kafka source does. Offsets mean "next offset to read".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# Kafka's JSON sentinels in startingOffsets / endingOffsets.
EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]

# Canonical spelling of every accepted option; Spark lower-cases keys, we compare lower-case.
SOURCE_OPTIONS = (
    "bootstrap.servers",
    "assign",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "maxPartitions",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "includeHeaders",
    "pushdown",
    "localReads",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
    "client.id",
    "request.timeout.ms",
    "fetch.max.bytes",
)
SINK_OPTIONS = (
    "bootstrap.servers",
    "topic",
    "client.id",
    "request.timeout.ms",
    "acks",
    "compression.type",
    "batch.size",
    "includeHeaders",
)
# Our names also accepted with Kafka's `kafka.` prefix, for drop-in migration.
KAFKA_PREFIX = "kafka."
ALL_OPTIONS = tuple(dict.fromkeys((*SOURCE_OPTIONS, *SINK_OPTIONS)))
_PREFIXABLE = (
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "fetch.max.bytes",
    "acks",
    "compression.type",
    "batch.size",
    "group.id",
)
_CANONICAL = {name.lower(): name for name in ALL_OPTIONS}
_CANONICAL.update({f"{KAFKA_PREFIX}{name}": f"{KAFKA_PREFIX}{name}" for name in _PREFIXABLE})

# Options Spark itself adds to a data source's options (streaming writes get the checkpoint).
SPARK_OWNED_OPTIONS = frozenset({"checkpointlocation"})

STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")
_STRATEGY_LIST = ", ".join(STRATEGY_KEYS)

DEFAULT_MAX_TRIGGER_DELAY = "15m"
# A fetch answers at most this many bytes per partition: big enough for >= 10k-row Arrow
# batches of 100-byte records, small enough to keep an executor's memory flat.
DEFAULT_FETCH_MAX_BYTES = 8 * 1024 * 1024
# Kafka's kafkaConsumer.pollTimeoutMs defaults to spark.network.timeout (120 s).
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_NUM_RETRIES = 3
DEFAULT_RETRY_INTERVAL_MS = 1000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
# Records per produced batch in the sink: one msgpack pack per batch, like the bench.
DEFAULT_SINK_BATCH_RECORDS = 1000

_KAFKA_REJECTED = {
    "kafka.auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported.\n"
        "Instead set the source option 'startingoffsets' to 'earliest' or 'latest'\n"
        "to specify where to start. Structured Streaming manages which offsets are consumed\n"
        "internally, rather than relying on the kafkaConsumer to do it. This will ensure that no\n"
        "data is missed when new topics/partitions are dynamically subscribed. Note that\n"
        "'startingoffsets' only applies when a new Streaming query is started, and\n"
        "that resuming will always pick up from where the query left off. See the docs for more\n"
        "details."
    ),
    "kafka.key.deserializer": (
        "Kafka option 'key.deserializer' is not supported as keys are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the keys."
    ),
    "kafka.value.deserializer": (
        "Kafka option 'value.deserializer' is not supported as values are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly deserialize "
        "the values."
    ),
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
    "kafka.key.serializer": (
        "Kafka option 'key.serializer' is not supported as keys are serialized with "
        "ByteArraySerializer."
    ),
    "kafka.value.serializer": (
        "Kafka option 'value.serializer' is not supported as value are serialized with "
        "ByteArraySerializer."
    ),
}

_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
_TIMESTAMPS_EXAMPLE = (
    '{"topicA": {"0": 123456789, "1": 123456789},\n"topicB": {"0": 123456789, "1": 123456789}}'
)


class OptionError(ValueError):
    """An invalid option; the message is what the user sees, so it names the option."""


# --- where to start / stop -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Earliest:
    """Start (or end) at each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class Latest:
    """Start (or end) at each partition's high watermark."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Per-partition offsets; -2 means earliest and -1 latest, as in Kafka's JSON."""

    offsets: dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """Per-partition epoch-ms timestamps, resolved with `offset_for_time`."""

    timestamps: dict[TopicPartition, int]
    strategy: str = "error"


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """One epoch-ms timestamp applied to every partition."""

    timestamp_ms: int
    strategy: str = "error"


OffsetLimit = Earliest | Latest | SpecificOffsets | SpecificTimestamps | GlobalTimestamp


# --- what to read ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assign:
    """A fixed set of topic-partitions."""

    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Subscribe:
    """A list of topics; all their partitions are read."""

    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    """A regular expression over topic names, re-evaluated at every planning or trigger."""

    pattern: str


Subscription = Assign | Subscribe | SubscribePattern


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated read options. Plain data: it is pickled into every task."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetLimit
    ending: OffsetLimit
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    max_bytes_per_trigger: int | None = None
    pushdown: str = "auto"
    local_reads: str = "auto"
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    num_retries: int = DEFAULT_NUM_RETRIES
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    client_id: str = "tidelog-spark"
    warnings: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Validated write options."""

    bootstrap_servers: str
    topic: str | None
    acks: int = -1
    compression: str = "none"
    batch_records: int = DEFAULT_SINK_BATCH_RECORDS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    client_id: str = "tidelog-spark-sink"


# --- generic helpers -------------------------------------------------------------------------


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Options keyed lower-case, as Spark delivers them (also for direct callers)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_known(options: Mapping[str, str]) -> None:
    """Refuse unknown option names, suggesting the closest valid one."""
    for key in lower_keys(options):
        if key in _KAFKA_REJECTED:
            raise OptionError(_KAFKA_REJECTED[key])
        if key in _CANONICAL or key in SPARK_OWNED_OPTIONS:
            continue
        candidates = difflib.get_close_matches(key, list(_CANONICAL), n=1, cutoff=0.6)
        hint = f"; did you mean '{_CANONICAL[candidates[0]]}'?" if candidates else ""
        valid = ", ".join(ALL_OPTIONS)
        raise OptionError(
            f"Unknown option '{key}' for the tidelog data source{hint} Valid options: {valid}"
        )


def _get(opts: Mapping[str, str], name: str) -> str | None:
    """Our name, or its `kafka.`-prefixed alias (ours wins when both are set)."""
    value = opts.get(name.lower())
    if value is None and name in _PREFIXABLE:
        value = opts.get(f"{KAFKA_PREFIX}{name}")
    return value


def parse_bool(name: str, value: str) -> bool:
    """Scala's `toBoolean`: only true/false, case-insensitive."""
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f'Option \'{name}\' must be "true" or "false", got "{value}"')
    return text == "true"


def parse_long(name: str, value: str, *, positive: bool = False, minimum: int | None = None) -> int:
    """An integer option; `positive` gives Kafka's "<name> must be positive" message."""
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(f"Option '{name}' expects an integer, got '{value}'") from None
    if positive and number <= 0:
        raise OptionError(f"{name} must be positive")
    if minimum is not None and number < minimum:
        raise OptionError(f"Option '{name}' must be >= {minimum}, got {number}")
    return number


_DURATION_UNITS_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_DURATION = re.compile(r"^\s*(-?\d+)\s*([a-z]*)\s*$")


def parse_duration_ms(name: str, value: str) -> int:
    """Spark's time strings (`15m`, `10s`, `500ms`, `1h`); a bare number is milliseconds."""
    match = _DURATION.match(value.lower())
    if not match or match.group(2) not in ("", *_DURATION_UNITS_MS):
        raise OptionError(
            f"Option '{name}' expects a duration such as '15m', '30s' or '500ms', got '{value}'"
        )
    unit = match.group(2) or "ms"
    return int(int(match.group(1)) * _DURATION_UNITS_MS[unit])


def _json(value: str, example: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        raise OptionError(f"Expected e.g. {example}, got {value}") from None


def parse_assign(value: str) -> tuple[TopicPartition, ...]:
    """Kafka's `assign` JSON: {"topicA":[0,1]}."""
    parsed = _json(value, _ASSIGN_EXAMPLE)
    if not isinstance(parsed, dict) or not all(
        isinstance(t, str) and isinstance(ps, list) and all(type(p) is int for p in ps)
        for t, ps in parsed.items()
    ):
        raise OptionError(f"Expected e.g. {_ASSIGN_EXAMPLE}, got {value}")
    return tuple(dict.fromkeys((t, p) for t, ps in parsed.items() for p in ps))


def _partition_map(value: str, example: str) -> dict[TopicPartition, int]:
    parsed = _json(value, example)
    result: dict[TopicPartition, int] = {}
    if not isinstance(parsed, dict):
        raise OptionError(f"Expected e.g. {example}, got {value}")
    for topic, per_partition in parsed.items():
        if not isinstance(per_partition, dict):
            raise OptionError(f"Expected e.g. {example}, got {value}")
        for partition, number in per_partition.items():
            if type(number) is not int or not str(partition).lstrip("-").isdigit():
                raise OptionError(f"Expected e.g. {example}, got {value}")
            result[(topic, int(partition))] = number
    return result


def parse_partition_offsets(value: str) -> dict[TopicPartition, int]:
    """Kafka's per-partition offsets JSON: {"topicA":{"0":23,"1":-1}}."""
    return _partition_map(value, _OFFSETS_EXAMPLE)


def parse_partition_timestamps(value: str) -> dict[TopicPartition, int]:
    """Kafka's per-partition timestamps JSON: {"topicA":{"0":1000}}."""
    return _partition_map(value, _TIMESTAMPS_EXAMPLE)


def offset_range_limit(
    opts: Mapping[str, str],
    global_key: str,
    by_ts_key: str,
    offsets_key: str,
    default: OffsetLimit,
) -> OffsetLimit:
    """Kafka's getKafkaOffsetRangeLimit: global timestamp > per-partition timestamps > offsets."""
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got '{opts['startingoffsetsbytimestampstrategy']}'"
        )
    if global_key in opts:
        text = opts[global_key].strip()
        try:
            return GlobalTimestamp(int(text), strategy)
        except ValueError:
            raise OptionError(f"Expected a single long value, got {text}") from None
    if by_ts_key in opts:
        return SpecificTimestamps(parse_partition_timestamps(opts[by_ts_key].strip()), strategy)
    if offsets_key in opts:
        text = opts[offsets_key].strip()
        if text.lower() == "latest":
            return Latest()
        if text.lower() == "earliest":
            return Earliest()
        return SpecificOffsets(parse_partition_offsets(text))
    return default


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _check_limit_validity(start: OffsetLimit, end: OffsetLimit) -> None:
    """Kafka's checkOffsetLimitValidity: matching partition sets, start <= end."""
    if isinstance(start, SpecificOffsets) and isinstance(end, SpecificOffsets):
        pairs, kind = (start.offsets, end.offsets), "offset"
    elif isinstance(start, SpecificTimestamps) and isinstance(end, SpecificTimestamps):
        pairs, kind = (start.timestamps, end.timestamps), "timestamp"
    else:
        return
    if set(pairs[0]) != set(pairs[1]):
        raise OptionError(
            "The specified start and end offsets contain different topic partitions: "
            f"start {sorted(map(_tp, pairs[0]))}, end {sorted(map(_tp, pairs[1]))}"
        )
    for tp, first in pairs[0].items():
        last = pairs[1][tp]
        if first >= 0 and last >= 0 and first > last:
            raise OptionError(
                f"The start {kind} {first} is greater than the end {kind} {last} "
                f"for topic partition {_tp(tp)}"
            )


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    """Exactly one of subscribe / subscribePattern / assign, with Kafka's messages."""
    given = [k for k in STRATEGY_KEYS if k in opts]
    if not given:
        raise OptionError(
            "One of the following options must be specified for Kafka source: "
            f"{_STRATEGY_LIST}. See the docs for more details."
        )
    if len(given) > 1:
        raise OptionError(
            "Only one of the following options can be specified for Kafka source: "
            f"{_STRATEGY_LIST}. See the docs for more details."
        )
    key, value = given[0], opts[given[0]]
    if key == "assign":
        if not value.strip().startswith("{"):
            raise OptionError(
                f"No topicpartitions to assign as specified value for option 'assign' is '{value}'"
            )
        return Assign(parse_assign(value))
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        return Subscribe(topics)
    pattern = value.strip()
    if not pattern:
        raise OptionError(
            "Pattern to subscribe is empty as specified value for option "
            f"'subscribePattern' is '{value}'"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(f"Invalid regex in option 'subscribePattern' '{value}': {exc}") from None
    return SubscribePattern(pattern)


def bootstrap_servers(opts: Mapping[str, str]) -> str:
    """`bootstrap.servers`, or Kafka's `kafka.bootstrap.servers`; required."""
    value = _get(opts, "bootstrap.servers")
    if not value or not value.strip():
        raise OptionError(
            "Option 'bootstrap.servers' (or 'kafka.bootstrap.servers') must be specified for "
            "configuring the tidelog client"
        )
    return value.strip()


def _optional_long(opts: Mapping[str, str], key: str, name: str, **kw: object) -> int | None:
    return parse_long(name, opts[key], **kw) if key in opts else None  # type: ignore[arg-type]


def _auto_true_false(opts: Mapping[str, str], name: str) -> str:
    """An option that is `auto` (the default), `true` or `false`."""
    value = opts.get(name.lower(), "auto").strip().lower()
    if value not in ("auto", "true", "false"):
        raise OptionError(f"Option '{name}' must be 'auto', 'true' or 'false', got '{value}'")
    return value


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate read options the way the Kafka source does for a batch or a streaming query.

    `streaming=None` (at `load()`, before Spark says which) skips the mode-specific rules.
    """
    opts = lower_keys(options)
    check_known(opts)
    warnings: list[str] = []
    if streaming:
        if "endingoffsets" in opts:
            raise OptionError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
            raise OptionError("ending timestamp not valid in streaming queries")
    starting = offset_range_limit(
        opts,
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "startingoffsets",
        Latest() if streaming else Earliest(),
    )
    ending = offset_range_limit(
        opts, "endingtimestamp", "endingoffsetsbytimestamp", "endingoffsets", Latest()
    )
    if streaming is False:
        _check_batch_limits(starting, ending)
        for key, name in (
            ("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            ("minoffsetspertrigger", "minOffsetsPerTrigger"),
            ("maxtriggerdelay", "maxTriggerDelay"),
            ("maxbytespertrigger", "maxBytesPerTrigger"),
        ):
            if key in opts:
                warnings.append(f"{name} option ignored in batch queries")
    _check_limit_validity(starting, ending)
    subscription = parse_subscription(opts)
    servers = bootstrap_servers(opts)
    min_partitions = _optional_long(opts, "minpartitions", "minPartitions", positive=True)
    max_records = _optional_long(
        opts, "maxrecordsperpartition", "maxrecordsperpartition", positive=True
    )
    max_partitions = _optional_long(opts, "maxpartitions", "maxPartitions", positive=True)
    if min_partitions and max_partitions and min_partitions > max_partitions:
        raise OptionError(
            f"The value of minPartitions({min_partitions}) is higher than the "
            f"maxPartitions({max_partitions})."
        )
    max_offsets = _optional_long(
        opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger", positive=True
    )
    min_offsets = _optional_long(
        opts, "minoffsetspertrigger", "minOffsetsPerTrigger", positive=True
    )
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise OptionError(
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
            f"maxOffsetsPerTrigger({max_offsets})."
        )
    if "kafka.group.id" in opts:
        warnings.append(
            "Kafka option 'kafka.group.id' has been set on this query; tidelog has no consumer "
            "groups, so it is ignored (and so is groupIdPrefix)."
        )
    pushdown = _auto_true_false(opts, "pushdown")
    local_reads = _auto_true_false(opts, "localReads")
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        max_partitions=max_partitions,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=parse_duration_ms(
            "maxTriggerDelay", opts.get("maxtriggerdelay", DEFAULT_MAX_TRIGGER_DELAY)
        ),
        max_bytes_per_trigger=_optional_long(
            opts, "maxbytespertrigger", "maxBytesPerTrigger", positive=True
        ),
        pushdown=pushdown,
        local_reads=local_reads,
        poll_timeout_ms=parse_long(
            "kafkaConsumer.pollTimeoutMs",
            opts.get("kafkaconsumer.polltimeoutms", str(DEFAULT_POLL_TIMEOUT_MS)),
            positive=True,
        ),
        num_retries=parse_long(
            "fetchOffset.numRetries", opts.get("fetchoffset.numretries", "3"), minimum=0
        ),
        retry_interval_ms=parse_long(
            "fetchOffset.retryIntervalMs",
            opts.get("fetchoffset.retryintervalms", str(DEFAULT_RETRY_INTERVAL_MS)),
            minimum=0,
        ),
        request_timeout_ms=parse_long(
            "request.timeout.ms",
            _get(opts, "request.timeout.ms") or str(DEFAULT_REQUEST_TIMEOUT_MS),
            positive=True,
        ),
        fetch_max_bytes=parse_long(
            "fetch.max.bytes",
            _get(opts, "fetch.max.bytes") or str(DEFAULT_FETCH_MAX_BYTES),
            positive=True,
        ),
        client_id=_get(opts, "client.id") or "tidelog-spark",
        warnings=tuple(warnings),
    )


def _check_batch_limits(starting: OffsetLimit, ending: OffsetLimit) -> None:
    """Kafka's validateBatchOptions: no latest start, no earliest end."""
    if isinstance(starting, Latest):
        raise OptionError("starting offset can't be latest for batch queries on Kafka")
    if isinstance(starting, SpecificOffsets):
        for tp, offset in starting.offsets.items():
            if offset == LATEST:
                raise OptionError(
                    f"startingOffsets for {_tp(tp)} can't be latest for batch queries on Kafka"
                )
    if isinstance(ending, Earliest):
        raise OptionError("ending offset can't be earliest for batch queries on Kafka")
    if isinstance(ending, SpecificOffsets):
        for tp, offset in ending.offsets.items():
            if offset == EARLIEST:
                raise OptionError(
                    f"ending offset for {_tp(tp)} can't be earliest for batch queries on Kafka"
                )


_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate write options: bootstrap servers, optional `topic`, producer settings."""
    opts = lower_keys(options)
    check_known(opts)
    acks = parse_long("acks", _get(opts, "acks") or "-1")
    if acks not in (-1, 1):
        raise OptionError(
            f"Option 'acks' must be -1 (all, fsynced) or 1 (leader); got {acks}. acks=0 would "
            "break the sink's at-least-once guarantee."
        )
    compression = (_get(opts, "compression.type") or "none").strip().lower()
    if compression not in _COMPRESSIONS:
        raise OptionError(
            f"Option 'compression.type' must be one of {', '.join(_COMPRESSIONS)}, "
            f"got '{compression}'"
        )
    topic = opts.get("topic")
    return SinkOptions(
        bootstrap_servers=bootstrap_servers(opts),
        topic=topic.strip() if topic is not None else None,
        acks=acks,
        compression=compression,
        batch_records=parse_long(
            "batch.size",
            _get(opts, "batch.size") or str(DEFAULT_SINK_BATCH_RECORDS),
            positive=True,
        ),
        request_timeout_ms=parse_long(
            "request.timeout.ms",
            _get(opts, "request.timeout.ms") or str(DEFAULT_REQUEST_TIMEOUT_MS),
            positive=True,
        ),
        client_id=_get(opts, "client.id") or "tidelog-spark-sink",
    )
