"""Options of the `tidelog` format: Kafka's names, precedence and error messages.

Spark hands options over lower-cased and as strings, and shows a Python exception's
message verbatim, so every check here raises `OptionError` with a message that names
the option the way the Kafka source does. Offsets mean "next offset to read".

Every option is declared once in `SOURCE_SETTINGS` / `SINK_SETTINGS` (name, field,
type, default, bounds, doc; protocol/settings.py says how to add one): the parsers
take defaults and bounds from there, and docs/spark.md's option tables are rendered
from them by deploy/build_settings.py.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.settings import INT32_MAX, Setting, check_fields, settings_by_name
from tidelog.security import (
    PLAINTEXT,
    SECURITY_PROPERTIES,
    SECURITY_PROTOCOLS,
    Security,
    security_from_properties,
)

# Kafka's JSON sentinels in startingOffsets / endingOffsets.
EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]

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

_AUTO_TRUE_FALSE = ("auto", "true", "false")
# Hadoop S3A's names for what `s3.*` sets (Spark users already pass these), by ours.
_S3A_NAMES = {
    "fs.s3a.endpoint": "s3.endpoint",
    "fs.s3a.endpoint.region": "s3.region",
    "fs.s3a.access.key": "s3.accessKey",
    "fs.s3a.secret.key": "s3.secretKey",
    "fs.s3a.session.token": "s3.sessionToken",
    "fs.s3a.path.style.access": "s3.pathStyle",
}
SPARK_HADOOP_PREFIX = "spark.hadoop."
_KAFKA, _OURS, _SINK = "kafka", "tidelog", "sink"  # sections of docs/spark.md's tables
_S = Setting


# Every accepted option, declared once (how to add one: protocol/settings.py); the
# declaration order is the order `Unknown option` lists them in. `attr` names the
# SourceOptions/SinkOptions field when the option fills one directly. An int option
# sent on the wire is bounded by its request field (fetch `max_bytes` and
# `max_wait_ms` are int32), so a value that would break every fetch is refused here.
# TLS and SASL, with Kafka's client names (also with the `kafka.` prefix, as Spark's Kafka
# source takes them: `kafka.security.protocol`, `kafka.sasl.jaas.config`, ...). Together
# they make the `security` field (tidelog.security.security_from_properties).
def _security_rows(section: str) -> tuple[Setting, ...]:
    return (
        _S("security.protocol", "", str, "PLAINTEXT",
           "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (docs/security.md).",
           choices=SECURITY_PROTOCOLS, section=section),
        _S("sasl.mechanism", "", str, None, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
           section=section),
        _S("sasl.jaas.config", "", str, None,
           'Kafka\'s form: `...ScramLoginModule required username="u" password="p";`.',
           section=section),
        _S("sasl.username", "", str, None, "SASL user (instead of sasl.jaas.config).",
           section=section),
        _S("sasl.password", "", str, None, "SASL password (instead of sasl.jaas.config).",
           section=section),
        _S("ssl.cafile", "", str, None,
           "PEM CA file the broker's certificate must chain to (default: the system's).",
           section=section),
        _S("ssl.truststore.location", "", str, None, "Same as ssl.cafile (a PEM file).",
           section=section),
        _S("ssl.certfile", "", str, None, "PEM client certificate (mTLS).", section=section),
        _S("ssl.keyfile", "", str, None, "PEM key of ssl.certfile.", section=section),
        _S("ssl.endpoint.identification.algorithm", "", str, "https",
           "Empty: do not check the broker's host name against its certificate.",
           section=section),
    )  # fmt: skip


SOURCE_SETTINGS: tuple[Setting, ...] = (
    _S("bootstrap.servers", "bootstrap_servers", str, None,
       "`host:port` of the broker (also as `kafka.bootstrap.servers`).",
       section=_KAFKA, default_text="required"),
    _S("assign", "", str, None,
       'JSON `{"topicA":[0,1]}`. An assigned partition that does not exist is an error.',
       section=_KAFKA),
    _S("subscribe", "", str, None,
       "Comma-separated topics. Exactly one of `subscribe`, `subscribePattern`, `assign`.",
       section=_KAFKA),
    _S("subscribePattern", "", str, None,
       "Python regular expression over topic names (full match; topics starting `__` "
       "excluded), re-evaluated at every planning and trigger.", section=_KAFKA),
    _S("startingOffsets", "", str, None,
       '`earliest`, `latest` (streaming), or JSON `{"t":{"0":23,"1":-2}}` with -2 = earliest, '
       "-1 = latest; JSON must list every partition.",
       section=_KAFKA, default_text="batch `earliest`, streaming `latest`"),
    _S("endingOffsets", "", str, "latest",
       "Batch only. `latest` or JSON (-1 = latest). Exclusive.", section=_KAFKA),
    _S("startingTimestamp", "", str, None,
       "One epoch-ms timestamp for every partition: the first offset whose timestamp is >= "
       "it. Beats `startingOffsetsByTimestamp` and `startingOffsets`.", section=_KAFKA),
    _S("startingOffsetsByTimestamp", "", str, None,
       'JSON `{"t":{"0":1700000000000}}`; beats `startingOffsets`.', section=_KAFKA),
    _S("endingTimestamp", "", str, None,
       "Batch only; one timestamp for every partition, no match means latest.", section=_KAFKA),
    _S("endingOffsetsByTimestamp", "", str, None,
       "Batch only; per-partition JSON like `startingOffsetsByTimestamp`, no match means "
       "latest.", section=_KAFKA),
    _S("startingOffsetsByTimestampStrategy", "", str, "error",
       "No record at or after the start timestamp: `error` fails, `latest` starts at the end.",
       choices=("error", "latest"), section=_KAFKA),
    _S("failOnDataLoss", "fail_on_data_loss", bool, True,
       "Fail when offsets a query needs are gone (below the log start offset after retention "
       "or `delete-records`, a partition deleted, an offset that went backwards, a new "
       "partition not starting at 0). With `false`, skip them and log the exact lost range "
       "and count.", section=_KAFKA),
    _S("minPartitions", "min_partitions", int, None,
       "Split large ranges so there are at least this many tasks (Kafka's proportional rule).",
       low=1, section=_KAFKA),
    _S("maxRecordsPerPartition", "max_records_per_partition", int, None,
       "Split any range larger than this.", low=1, section=_KAFKA),
    _S("maxPartitions", "max_partitions", int, None,
       "Coalesce: pack ranges into at most this many tasks, balanced by size (Kafka can only "
       "split, so 500 tiny partitions make 500 tasks).", low=1, section=_OURS),
    _S("maxOffsetsPerTrigger", "max_offsets_per_trigger", int, None,
       "Streaming cap per micro-batch, shared in proportion to each partition's backlog "
       "(small partitions get at least 1).", low=1, section=_KAFKA),
    _S("minOffsetsPerTrigger", "min_offsets_per_trigger", int, None,
       "Streaming: skip a trigger until this many offsets are available or `maxTriggerDelay` "
       "has passed. Must be <= `maxOffsetsPerTrigger`.", low=1, section=_KAFKA),
    _S("maxTriggerDelay", "", str, "15m",
       "Streaming: the longest `minOffsetsPerTrigger` may hold a trigger back (`15m`, `30s`, "
       "`500ms`).", section=_KAFKA),
    _S("maxBytesPerTrigger", "max_bytes_per_trigger", int, None,
       "Streaming byte budget per micro-batch (`ReadMaxBytes`), turned into offsets with each "
       "partition's average stored bytes per offset. With `maxOffsetsPerTrigger` too, the "
       "smaller wins.", low=1, section=_OURS),
    _S("includeHeaders", "include_headers", bool, False, "Add the `headers` column.",
       section=_KAFKA),
    _S("isolationLevel", "isolation_level", str, "read_committed",
       "`read_committed` (the default: a job never sees a record of an aborted transaction, "
       "and reads up to the last stable offset) or `read_uncommitted` (every data record, "
       "as Kafka's consumer default). Transaction markers are never rows.",
       choices=("read_committed", "read_uncommitted"), section=_OURS),
    _S("pushdown", "pushdown", str, "auto",
       "Filter pushdown: `auto` follows `spark.sql.python.filterPushdown.enabled`; "
       "`true`/`false` force it (see below).", choices=_AUTO_TRUE_FALSE, section=_OURS),
    _S("localReads", "local_reads", str, "auto",
       "Tasks on the broker's host read fetched batches from the segment files themselves "
       "(like HDFS short-circuit reads; docs/protocol.md §9): the broker only locates them. "
       "`auto` does so when `bootstrap.servers` is a loopback address; `true`/`false` force "
       "it. A file that cannot be used (permissions, renamed or replaced) is fetched over the "
       "wire instead.", choices=_AUTO_TRUE_FALSE, section=_OURS),
    _S("kafkaConsumer.pollTimeoutMs", "poll_timeout_ms", int, DEFAULT_POLL_TIMEOUT_MS,
       "How long a task waits for offsets that are not there yet before it reports them lost.",
       low=1, high=INT32_MAX, section=_KAFKA),
    _S("fetchOffset.numRetries", "num_retries", int, DEFAULT_NUM_RETRIES,
       "Retries of the driver's metadata call.", low=0, section=_KAFKA),
    _S("fetchOffset.retryIntervalMs", "retry_interval_ms", int, DEFAULT_RETRY_INTERVAL_MS,
       "Wait between retries of the driver's metadata call.", low=0, section=_KAFKA),
    _S("groupIdPrefix", "", str, None,
       "Accepted for compatibility, as is `kafka.group.id`; Tidelog has no consumer groups "
       "(a warning says so).", section=_KAFKA),
    _S("client.id", "client_id", str, "tidelog-spark",
       "Client id sent to the broker (also as `kafka.client.id`).", section=_OURS),
    _S("request.timeout.ms", "request_timeout_ms", int, DEFAULT_REQUEST_TIMEOUT_MS,
       "Client request timeout (also as `kafka.request.timeout.ms`).",
       low=1, high=INT32_MAX, section=_OURS),
    _S("fetch.max.bytes", "fetch_max_bytes", int, DEFAULT_FETCH_MAX_BYTES,
       "Bytes per fetch (converted into Arrow batches of about 2 MiB of records each).",
       low=1, high=INT32_MAX, section=_OURS),
    _S("remoteReads", "remote_reads", str, "auto",
       "Tasks read offsets below a tiered partition's local log start from the bucket "
       "themselves (docs/tiered-storage.md): the broker only names the segment objects. "
       "`auto` does so when the broker names them; `true` fails a read of such a range "
       "the broker cannot name objects for; `false` reads everything through the broker.",
       choices=_AUTO_TRUE_FALSE, section=_OURS),
    _S("s3.endpoint", "", str, None,
       "Object store URL for the tasks' cold reads (default: `fs.s3a.endpoint`, else the "
       "broker's `remote.log.storage.s3.endpoint`).", section=_OURS),
    _S("s3.region", "", str, None,
       "Region (default: `fs.s3a.endpoint.region`, else the broker's).", section=_OURS),
    _S("s3.accessKey", "", str, None,
       "Access key id (default: `fs.s3a.access.key`, else boto3's chain: "
       "`AWS_ACCESS_KEY_ID`, ~/.aws, instance profile).", section=_OURS),
    _S("s3.secretKey", "", str, None, "Secret key (default: `fs.s3a.secret.key`, else "
       "boto3's chain).", section=_OURS),
    _S("s3.sessionToken", "", str, None, "Session token (default: `fs.s3a.session.token`).",
       section=_OURS),
    _S("s3.pathStyle", "", str, None,
       "`true`: path-style URLs (default: `fs.s3a.path.style.access`, else the broker's).",
       section=_OURS),
    *(_S(name, "", str, None, f"Hadoop's S3A name, as for Spark's file sources (also as "
         f"`spark.hadoop.{name}`): see `{ours}`.", section=_OURS)
      for name, ours in _S3A_NAMES.items()),
    *_security_rows(_KAFKA),
)  # fmt: skip
SINK_SETTINGS: tuple[Setting, ...] = (
    _S("bootstrap.servers", "bootstrap_servers", str, None,
       "`host:port` of the broker (also as `kafka.bootstrap.servers`).",
       section=_SINK, default_text="required"),
    _S("topic", "topic", str, None, "Overrides the `topic` column.", section=_SINK),
    _S("client.id", "client_id", str, "tidelog-spark-sink",
       "Client id sent to the broker (also as `kafka.client.id`).", section=_SINK),
    _S("request.timeout.ms", "request_timeout_ms", int, DEFAULT_REQUEST_TIMEOUT_MS,
       "Producer request timeout (also as `kafka.request.timeout.ms`).",
       low=1, high=INT32_MAX, section=_SINK),
    _S("acks", "acks", int, -1,
       "`-1` (fsynced) or `1` (written); `0` is refused (it would break at least once).",
       low=-1, high=1, section=_SINK),
    _S("compression.type", "compression", str, "none", "Batch compression.",
       choices=("none", "gzip", "snappy", "lz4", "zstd"), section=_SINK),
    _S("batch.size", "batch_records", int, DEFAULT_SINK_BATCH_RECORDS,
       "Records per produced batch.", low=1, section=_SINK),
    _S("includeHeaders", "", bool, False,
       "Accepted as in Kafka; a `headers` column is written whenever present.", section=_SINK),
    _S("exactlyOnce", "exactly_once", bool, False,
       "Each task writes as a producer derived from (query or write id, batch, partition): "
       "a retried task or replayed micro-batch is deduplicated. Needs deterministic input "
       "(see Writes).", section=_SINK),
    _S("writeId", "write_id", str, None,
       "With exactlyOnce: the id producers derive from (default: the streaming query id; "
       "for a batch write, a fresh one per save()). Reuse it to make a whole save() "
       "idempotent.", section=_SINK),
    *_security_rows(_SINK),
)  # fmt: skip
SOURCE_OPTIONS = tuple(s.name for s in SOURCE_SETTINGS)
SINK_OPTIONS = tuple(s.name for s in SINK_SETTINGS)
_SOURCE = settings_by_name(SOURCE_SETTINGS)
_SINK_BY_NAME = settings_by_name(SINK_SETTINGS)
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
    *SECURITY_PROPERTIES,
)
_CANONICAL = {name.lower(): name for name in ALL_OPTIONS}
_CANONICAL.update({f"{KAFKA_PREFIX}{name}": f"{KAFKA_PREFIX}{name}" for name in _PREFIXABLE})

# Options Spark itself adds to a data source's options (streaming writes get the checkpoint).
SPARK_OWNED_OPTIONS = frozenset({"checkpointlocation"})
# Tests only (undocumented): a sink task's attempts numbered below failAttempts (default
# 1: the first) fail after sending failAfterBatches batches.
TEST_FAIL_AFTER_BATCHES = "tidelog.test.failafterbatches"
TEST_FAIL_ATTEMPTS = "tidelog.test.failattempts"
_TEST_ONLY_OPTIONS = frozenset({TEST_FAIL_AFTER_BATCHES, TEST_FAIL_ATTEMPTS})

STRATEGY_KEYS = ("subscribe", "subscribepattern", "assign")
_STRATEGY_LIST = ", ".join(STRATEGY_KEYS)

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
class S3Settings:
    """How a task reaches the bucket for cold reads; None fields fall back to what the
    broker says (endpoint, region, path style) or to boto3's credential chain."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    path_style: bool | None = None

    def __repr__(self) -> str:  # plans and logs show this: never the secrets
        return f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r})"


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
    isolation_level: str = "read_committed"
    remote_reads: str = "auto"
    s3: S3Settings = S3Settings()
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    num_retries: int = DEFAULT_NUM_RETRIES
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    client_id: str = "tidelog-spark"
    security: Security = PLAINTEXT
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def read_committed(self) -> bool:
        """Rows of committed transactions only, up to the last stable offset."""
        return self.isolation_level == "read_committed"


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
    security: Security = PLAINTEXT
    exactly_once: bool = False
    write_id: str | None = None
    fail_after_batches: int | None = None  # TEST_FAIL_AFTER_BATCHES
    fail_attempts: int = 1  # TEST_FAIL_ATTEMPTS


# --- generic helpers -------------------------------------------------------------------------


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Options keyed lower-case, as Spark delivers them (also for direct callers)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_known(options: Mapping[str, str]) -> None:
    """Refuse unknown option names, suggesting the closest valid one."""
    for key in lower_keys(options):
        if key in _KAFKA_REJECTED:
            raise OptionError(_KAFKA_REJECTED[key])
        if key in _CANONICAL or key in SPARK_OWNED_OPTIONS or key in _TEST_ONLY_OPTIONS:
            continue
        if key.startswith(SPARK_HADOOP_PREFIX) and key[len(SPARK_HADOOP_PREFIX) :] in _S3A_NAMES:
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


def parse_long(
    name: str,
    value: str,
    *,
    positive: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """An integer option; `positive` gives Kafka's "<name> must be positive" message."""
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(f"Option '{name}' expects an integer, got '{value}'") from None
    if positive and number <= 0:
        raise OptionError(f"{name} must be positive")
    if minimum is not None and number < minimum:
        raise OptionError(f"Option '{name}' must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise OptionError(f"Option '{name}' must be <= {maximum}, got {number}")
    return number


# Kafka's messages spell these options lower-case ("maxrecordsperpartition must be positive").
_MESSAGE_NAMES = {"maxRecordsPerPartition": "maxrecordsperpartition"}


def _long_option(opts: Mapping[str, str], setting: Setting) -> int | None:
    """A declared int option (or its `kafka.` alias): its default when absent, else checked
    against the declared bounds with Kafka's messages."""
    text = _get(opts, setting.name)
    if text is None:
        return setting.default  # type: ignore[no-any-return]
    low, high = setting.bounds
    return parse_long(
        _MESSAGE_NAMES.get(setting.name, setting.name),
        text,
        positive=low == 1,
        minimum=int(low) if low != 1 else None,
        maximum=int(high),
    )


def _source_long(opts: Mapping[str, str], name: str) -> int | None:
    return _long_option(opts, _SOURCE[name])


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


def _isolation_level(opts: Mapping[str, str]) -> str:
    setting = _SOURCE["isolationLevel"]
    value: str = opts.get("isolationlevel", setting.default).strip().lower()
    if value not in setting.choices:
        raise OptionError(
            f"Option 'isolationLevel' must be 'read_committed' or 'read_uncommitted', got '{value}'"
        )
    return value


def _auto_true_false(opts: Mapping[str, str], name: str) -> str:
    """An option that is `auto` (the default), `true` or `false`."""
    setting = _SOURCE[name]
    value: str = opts.get(name.lower(), setting.default).strip().lower()
    if value not in setting.choices:
        raise OptionError(f"Option '{name}' must be 'auto', 'true' or 'false', got '{value}'")
    return value


def _source_bool(opts: Mapping[str, str], name: str) -> bool:
    default = _SOURCE[name].text(_SOURCE[name].default)
    return parse_bool(name, opts.get(name.lower(), default))


def _check_mode(opts: Mapping[str, str], streaming: bool | None) -> None:
    """Kafka's validateStreamOptions: no ending options in a streaming query."""
    if streaming:
        if "endingoffsets" in opts:
            raise OptionError("ending offset not valid in streaming queries")
        if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
            raise OptionError("ending timestamp not valid in streaming queries")


def _offset_limits(
    opts: Mapping[str, str], streaming: bool | None, warnings: list[str]
) -> tuple[OffsetLimit, OffsetLimit]:
    """Where to start and stop, with the batch-only rules and warnings (Kafka's order)."""
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
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
                     "maxBytesPerTrigger"):  # fmt: skip
            if name.lower() in opts:
                warnings.append(f"{name} option ignored in batch queries")
    _check_limit_validity(starting, ending)
    return starting, ending


def _partitioning(opts: Mapping[str, str]) -> dict[str, int | None]:
    """minPartitions, maxRecordsPerPartition and maxPartitions, checked together."""
    values = {
        _SOURCE[name].attr: _source_long(opts, name)
        for name in ("minPartitions", "maxRecordsPerPartition", "maxPartitions")
    }
    low, high = values["min_partitions"], values["max_partitions"]
    if low and high and low > high:
        raise OptionError(
            f"The value of minPartitions({low}) is higher than the maxPartitions({high})."
        )
    return values


def _trigger_limits(opts: Mapping[str, str]) -> dict[str, int | None]:
    """Streaming rate limits (ignored by batch queries, which warn about them)."""
    max_offsets = _source_long(opts, "maxOffsetsPerTrigger")
    min_offsets = _source_long(opts, "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise OptionError(
            f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
            f"maxOffsetsPerTrigger({max_offsets})."
        )
    return {
        "max_offsets_per_trigger": max_offsets,
        "min_offsets_per_trigger": min_offsets,
        "max_trigger_delay_ms": parse_duration_ms(
            "maxTriggerDelay", opts.get("maxtriggerdelay", _SOURCE["maxTriggerDelay"].default)
        ),
        "max_bytes_per_trigger": _source_long(opts, "maxBytesPerTrigger"),
    }


def _client_settings(opts: Mapping[str, str]) -> dict[str, object]:
    """How the driver and the tasks talk to the broker."""
    return {
        **{
            _SOURCE[name].attr: _source_long(opts, name)
            for name in (
                "kafkaConsumer.pollTimeoutMs",
                "fetchOffset.numRetries",
                "fetchOffset.retryIntervalMs",
                "request.timeout.ms",
                "fetch.max.bytes",
            )
        },
        "client_id": _get(opts, "client.id") or _SOURCE["client.id"].default,
        "security": security_option(opts),
    }


def security_option(opts: Mapping[str, str]) -> Security:
    """TLS and SASL from the security options (OptionError naming what is wrong)."""
    props = {name: value for name in SECURITY_PROPERTIES if (value := _get(opts, name))}
    try:
        return security_from_properties(props)
    except ValueError as exc:
        raise OptionError(f"Security options: {exc}") from exc


def s3_settings(opts: Mapping[str, str]) -> S3Settings:
    """`s3.*`, else Hadoop's `fs.s3a.*` (or `spark.hadoop.fs.s3a.*`) options."""
    by_ours: dict[str, str | None] = {}
    for s3a, ours in _S3A_NAMES.items():
        value = opts.get(ours.lower())
        if value is None:
            value = opts.get(s3a, opts.get(SPARK_HADOOP_PREFIX + s3a))
        by_ours[ours] = value.strip() if value is not None and value.strip() else None
    path_style = by_ours["s3.pathStyle"]
    return S3Settings(
        endpoint=by_ours["s3.endpoint"],
        region=by_ours["s3.region"],
        access_key=by_ours["s3.accessKey"],
        secret_key=by_ours["s3.secretKey"],
        session_token=by_ours["s3.sessionToken"],
        path_style=parse_bool("s3.pathStyle", path_style) if path_style is not None else None,
    )


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Validate read options the way the Kafka source does for a batch or a streaming query.

    `streaming=None` (at `load()`, before Spark says which) skips the mode-specific rules.
    """
    opts = lower_keys(options)
    check_known(opts)
    warnings: list[str] = []
    _check_mode(opts, streaming)
    starting, ending = _offset_limits(opts, streaming, warnings)
    subscription = parse_subscription(opts)
    servers = bootstrap_servers(opts)
    partitioning = _partitioning(opts)
    triggers = _trigger_limits(opts)
    if "kafka.group.id" in opts:
        warnings.append(
            "Kafka option 'kafka.group.id' has been set on this query; tidelog has no consumer "
            "groups, so it is ignored (and so is groupIdPrefix)."
        )
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        pushdown=_auto_true_false(opts, "pushdown"),
        local_reads=_auto_true_false(opts, "localReads"),
        isolation_level=_isolation_level(opts),
        remote_reads=_auto_true_false(opts, "remoteReads"),
        s3=s3_settings(opts),
        fail_on_data_loss=_source_bool(opts, "failOnDataLoss"),
        include_headers=_source_bool(opts, "includeHeaders"),
        **partitioning,  # type: ignore[arg-type]
        **triggers,  # type: ignore[arg-type]
        **_client_settings(opts),  # type: ignore[arg-type]
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


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate write options: bootstrap servers, optional `topic`, producer settings."""
    opts = lower_keys(options)
    check_known(opts)
    acks = parse_long("acks", _get(opts, "acks") or str(_SINK_BY_NAME["acks"].default))
    if acks not in (-1, 1):
        raise OptionError(
            f"Option 'acks' must be -1 (all, fsynced) or 1 (leader); got {acks}. acks=0 would "
            "break the sink's at-least-once guarantee."
        )
    codecs = _SINK_BY_NAME["compression.type"]
    compression = (_get(opts, "compression.type") or codecs.default).strip().lower()
    if compression not in codecs.choices:
        raise OptionError(
            f"Option 'compression.type' must be one of {', '.join(codecs.choices)}, "
            f"got '{compression}'"
        )
    topic = opts.get("topic")
    return SinkOptions(
        bootstrap_servers=bootstrap_servers(opts),
        topic=topic.strip() if topic is not None else None,
        acks=acks,
        compression=compression,
        batch_records=_long_option(opts, _SINK_BY_NAME["batch.size"]),  # type: ignore[arg-type]
        request_timeout_ms=_long_option(  # type: ignore[arg-type]
            opts, _SINK_BY_NAME["request.timeout.ms"]
        ),
        client_id=_get(opts, "client.id") or _SINK_BY_NAME["client.id"].default,
        security=security_option(opts),
        exactly_once=parse_bool("exactlyOnce", opts.get("exactlyonce", "false")),
        write_id=opts.get("writeid"),
        fail_after_batches=(
            parse_long(TEST_FAIL_AFTER_BATCHES, opts[TEST_FAIL_AFTER_BATCHES], minimum=0)
            if TEST_FAIL_AFTER_BATCHES in opts
            else None
        ),
        fail_attempts=parse_long(TEST_FAIL_ATTEMPTS, opts.get(TEST_FAIL_ATTEMPTS, "1"), minimum=0),
    )


def _check_declared_defaults() -> None:
    """The records' defaults are the declared ones (checked once, at import)."""
    check_fields(SourceOptions, SOURCE_SETTINGS)
    check_fields(SinkOptions, SINK_SETTINGS)


_check_declared_defaults()
