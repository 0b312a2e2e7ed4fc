"""Broker configuration: Kafka's `server.properties` names, defaults and validation.

One frozen `BrokerConfig` flows from here down (docs/design.md). Sources, lowest
precedence first: built-in defaults (Kafka's, except where a finite limit is
safer), a `server.properties`-format file, then `--set key=value` overrides.
Every key is a `protocol.settings.Setting` row (that module says how to add one):

- the broker's own keys, `BROKER_SETTINGS` below;
- the cleaner's `log.cleaner.*` keys, `compaction.config.CLEANER_SETTINGS`, which
  become `BrokerConfig.cleaner`;
- the `log.*` (and `message.max.bytes`) synonyms of topic keys, taken from
  `storage.config.TOPIC_SETTINGS`; they set the default `LogConfig` every topic
  starts from (`BrokerConfig.log_config`).

An unknown key or an invalid value (out of its declared range included) raises
`InvalidConfig` naming the key and, for unknown keys, the closest valid name;
`tidelog serve` exits with status 2. deploy/server.properties is rendered from
these rows by deploy/build_settings.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.groups.config import GroupConfig
from broker.security.listeners import (
    ListenerSpec,
    SecurityProtocol,
    listeners_problem,
    parse_listeners,
)
from broker.transactions.config import TxnConfig
from compaction.config import CLEANER_SETTINGS, CleanerConfig
from protocol.api_types import DescribeConfigsConfigAnswer
from protocol.errors import InvalidConfig
from protocol.sasl.scram import MECHANISMS
from protocol.settings import INT32_MAX, INT64_MAX, Setting, check_fields, settings_by_name
from storage.config import TOPIC_CONFIG_DEFS, LogConfig
from storage.remote.settings import RemoteStoreSettings

DEFAULT_LISTEN = ("127.0.0.1", 9092)
DEFAULT_METRICS_LISTEN = ("127.0.0.1", 9644)
LONG_MAX = INT64_MAX
# A uint32 frame header cannot announce more, so no larger limit means anything.
FRAME_BYTES_MAX = 2**32 - 1


def _check_listeners(value: str) -> str | None:
    """Why `advertised.listeners` is invalid (entries NAME://HOST:PORT), or None."""
    for entry in filter(None, (e.strip() for e in value.split(","))):
        host, sep, port = entry.split("://", 1)[-1].rpartition(":")
        if "://" not in entry or not sep or not host or not port.isdigit() or int(port) > 65535:
            return f"{entry!r} is not NAME://HOST:PORT"
    return None


def _mechanisms_problem(value: frozenset[str]) -> str | None:
    unknown = sorted(value - set(MECHANISMS))
    if unknown:
        return f"unknown mechanism {unknown[0]!r} (one of {', '.join(MECHANISMS)})"
    return None if value else "name at least one mechanism"


def _super_users_problem(value: str) -> str | None:
    bad = [p for p in split_super_users(value) if not p.startswith("User:") or p == "User:"]
    return f"{bad[0]!r} is not a principal (User:<name>)" if bad else None


def split_super_users(value: str) -> frozenset[str]:
    """`super.users` text (Kafka: ';'-separated principals) to a set."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


# The broker's own keys (how to add one: protocol/settings.py). `section` places
# each in deploy/server.properties; the cleaner's keys are in compaction/config.py.
BROKER_SETTINGS: tuple[Setting, ...] = (
    Setting("log.dirs", "log_dirs", str, "",
            "The data directory (exactly one; `--data-dir` wins over it).", section="storage"),
    Setting("log.dir", "log_dir", str, "", "Used when log.dirs is not set.", section="storage"),
    Setting("num.partitions", "num_partitions", int, 1, "Partitions of an auto-created topic.",
            low=1, high=10_000, section="topics"),
    Setting("auto.create.topics.enable", "auto_create_topics_enable", bool, True,
            "Create an unknown topic on its first produce, as Kafka does.", section="topics"),
    Setting("socket.request.max.bytes", "socket_request_max_bytes", int, 104857600,
            "Largest request frame; larger ones close the connection.",
            low=1, high=FRAME_BYTES_MAX, section="connections"),
    Setting("connections.max.idle.ms", "connections_max_idle_ms", int, 600000,
            "Close connections silent for this long.", low=1, section="connections"),
    # Kafka ships no limit; a finite default keeps a connection flood from
    # exhausting file descriptors (docs/reliability.md BI-08).
    Setting("max.connections", "max_connections", int, 1000,
            "Connections beyond this are closed at once (keep LimitNOFILE well above it).",
            low=1, high=1_000_000, section="connections"),
    # Kafka has no such limit either; without it a peer trickling one frame byte by
    # byte is never idle and holds its connection slot forever (slowloris).
    Setting("socket.request.read.timeout.ms", "socket_request_read_timeout_ms", int, 30000,
            "A request must arrive whole within this long of its first byte (slowloris guard).",
            low=1, section="connections"),
    # Kafka's default is -1 (unbounded); a finite one keeps N connections from
    # holding N times the per-connection caps (issue 23 #6).
    Setting("queued.max.request.bytes", "queued_max_request_bytes", int, 536870912,
            "Broker-wide bytes of queued requests and unsent answers; past it reads pause.",
            low=1024 * 1024, section="connections"),
    Setting("node.id", "node_id", int, 1,
            "This broker's id in Kafka Metadata answers (leader of every partition, controller).",
            low=0, high=2**31 - 1, section="kafka"),
    Setting("advertised.listeners", "advertised_listeners", str, "",
            "Where Kafka clients should connect, as NAME://HOST:PORT (the first is used); "
            "empty: the address each client connected to.", check=_check_listeners,
            section="kafka"),
    Setting("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", int, 104857600,
            "segment.bytes of __consumer_offsets when the broker creates it.",
            low=1, high=2**31 - 1, section="topics"),
    # The group coordinator's keys (broker/groups/config.py validates them together).
    Setting("group.min.session.timeout.ms", "group_min_session_timeout_ms", int, 6000,
            "Shortest session timeout a consumer may ask for.", low=0, section="groups"),
    Setting("group.max.session.timeout.ms", "group_max_session_timeout_ms", int, 1800000,
            "Longest session timeout a consumer may ask for.", low=0, section="groups"),
    Setting("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", int, 3000,
            "How long the first rebalance of an empty group waits for more members.",
            low=0, section="groups"),
    Setting("group.max.size", "group_max_size", int, 1000,
            "Most members of one group (Kafka: unbounded; a bound on one group's memory).",
            low=1, high=1_000_000, section="groups"),
    Setting("offsets.retention.minutes", "offsets_retention_minutes", int, 10080,
            "Committed offsets of an empty group are dropped this long after it emptied.",
            low=1, section="groups"),
    Setting("offsets.retention.check.interval.ms", "offsets_retention_check_interval_ms", int,
            600000, "How often expired offsets are looked for.", low=1, section="groups"),
    # The transaction coordinator's keys (broker/transactions/config.py).
    Setting("transaction.max.timeout.ms", "transaction_max_timeout_ms", int, 900000,
            "Longest transaction.timeout.ms a transactional producer may ask for.",
            low=1, high=2**31 - 1, section="transactions"),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms", int, 10000,
            "How often open transactions are checked against their timeout.",
            low=1, high=2**31 - 1, section="transactions"),
    Setting("transactional.id.expiration.ms", "transactional_id_expiration_ms", int, 604800000,
            "An idle transactional id (no open transaction) is forgotten after this long.",
            low=1, high=2**31 - 1, section="transactions"),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms",
            "transaction_remove_expired_transaction_cleanup_interval_ms", int, 3600000,
            "How often expired transactional ids are looked for.",
            low=1, high=2**31 - 1, section="transactions"),
    Setting("transaction.state.log.segment.bytes", "transaction_state_log_segment_bytes", int,
            104857600, "segment.bytes of __transaction_state when the broker creates it.",
            low=1, high=2**31 - 1, section="transactions"),
    Setting("log.retention.check.interval.ms", "log_retention_check_interval_ms", int, 300000,
            "Period of the retention task.", low=1, section="retention"),
    Setting("log.initial.task.delay.ms", "log_initial_task_delay_ms", int, 30000,
            "Delay before the first retention, flush and checkpoint runs after startup.",
            low=0, section="retention"),
    Setting("log.flush.scheduler.interval.ms", "log_flush_scheduler_interval_ms", int,
            LONG_MAX, "How often the flush task checks flush.ms (Tidelog: at least every second).",
            low=0, section="flush"),
    Setting("log.flush.offset.checkpoint.interval.ms",
            "log_flush_offset_checkpoint_interval_ms", int, 60000,
            "Period of recovery-point checkpoint writes.", low=0, section="flush"),
    Setting("log.flush.start.offset.checkpoint.interval.ms",
            "log_flush_start_offset_checkpoint_interval_ms", int, 60000,
            "Period of log-start-offset checkpoint writes.", low=0, section="flush"),
    Setting("producer.id.expiration.check.interval.ms",
            "producer_id_expiration_check_interval_ms", int, 600000,
            "How often idle idempotent producers are forgotten (producer.id.expiration.ms).",
            low=1, high=2**31 - 1, section="producers"),
    # Security (docs/security.md): Kafka's names and meanings.
    Setting("listeners", "listeners", str, "",
            "Client listeners, SCHEME://HOST:PORT, comma-separated; SCHEME is PLAINTEXT, SSL, "
            "SASL_PLAINTEXT or SASL_SSL. --listen sets the first one's address. "
            "Empty: one PLAINTEXT listener at --listen.",
            check=listeners_problem, section="security"),
    Setting("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", frozenset,
            frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"}),
            "SASL mechanisms SASL_* listeners accept (PLAIN sends the password: use it "
            "only over SASL_SSL).", check=_mechanisms_problem, section="security"),
    Setting("ssl.certfile", "ssl_certfile", str, "",
            "PEM certificate chain of the TLS listeners (reloaded when the file changes).",
            section="security"),
    Setting("ssl.keyfile", "ssl_keyfile", str, "", "PEM private key of ssl.certfile.",
            section="security"),
    Setting("ssl.cafile", "ssl_cafile", str, "",
            "PEM CA bundle that client certificates must chain to (mTLS).", section="security"),
    Setting("ssl.client.auth", "ssl_client_auth", str, "none",
            "Client certificates on TLS listeners: required, requested or none; a "
            "certificate's subject becomes the principal (User:CN=...).",
            choices=("required", "requested", "none"), section="security"),
    Setting("metrics.ssl.enable", "metrics_ssl_enable", bool, False,
            "Serve /metrics and the health endpoints over TLS with ssl.certfile/ssl.keyfile.",
            section="security"),
    Setting("metrics.bearer.token.file", "metrics_bearer_token_file", str, "",
            "A file holding a token /metrics then requires as `Authorization: Bearer "
            "<token>` (re-read on change; /healthz, /livez and /readyz stay open).",
            section="security"),
    Setting("metrics.name.labels", "metrics_name_labels", str, "auto",
            "Label /metrics series with topic and group names: on, off, or auto (off when "
            "a listener authenticates or authorizer=on, unless metrics.bearer.token.file "
            "guards the page).", choices=("auto", "on", "off"), section="security"),
    Setting("console.enable", "console_enable", str, "auto",
            "The web console at /console/ on the metrics listener (docs/console.md): auto "
            "(on when --metrics-listen is a loopback address), on, or off.",
            choices=("auto", "on", "off"), section="security"),
    Setting("console.session.timeout.ms", "console_session_timeout_ms", int, 1800000,
            "A console login ends after this long without a request.",
            low=60000, high=86400000, section="security"),
    Setting("authorizer", "authorizer", str, "off",
            "on: every request is checked against the ACLs (tidelog acls); off: no checks.",
            choices=("on", "off"), section="security"),
    Setting("super.users", "super_users", str, "",
            "Principals the authorizer always allows, ';'-separated (User:admin;User:CN=ops).",
            check=_super_users_problem, section="security"),
    Setting("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", bool, False,
            "With the authorizer on: allow a request on a resource that has no ACL at all.",
            section="security"),
    Setting("connection.failed.authentication.delay.ms",
            "connection_failed_authentication_delay_ms", int, 100,
            "Wait this long before answering a failed authentication (slows guessing).",
            low=0, high=60_000, section="security"),
    Setting("kafka.listen.anonymous.enable", "kafka_listen_anonymous_enable", bool, False,
            "Let --kafka-listen (plaintext, anonymous) run beside SASL or mTLS listeners with "
            "authorizer=off, where its clients may do anything; refused at start otherwise.",
            section="security"),
    Setting("sasl.server.max.receive.size", "sasl_server_max_receive_size", int, 524288,
            "Largest request frame a client may send on a SASL listener before it has logged "
            "in; a larger one closes the connection (Kafka's key and default).",
            low=1024, high=INT32_MAX, section="security"),  # an INT in Kafka
    # Client quotas (broker/quotas/): the windows a client's rate is measured over.
    Setting("quota.window.num", "quota_window_num", int, 11,
            "Windows a client quota's rate is measured over (Kafka's key and default).",
            low=1, high=INT32_MAX, section="kafka"),
    Setting("quota.window.size.seconds", "quota_window_size_seconds", int, 1,
            "Length of each client quota window (Kafka's key and default).",
            low=1, high=INT32_MAX, section="kafka"),
    # Tiered storage (KIP-405; docs/retention.md "Tiered topics"). Kafka's keys where Kafka has one;
    # the store's own keys are Tidelog's (Kafka leaves them to the RemoteStorageManager
    # plugin's `rsm.config.*`).
    Setting("remote.log.storage.system.enable", "remote_log_storage_system_enable", bool, False,
            "Tiered storage on this broker: topics with remote.storage.enable=true copy rolled "
            "segments to the object store below (Kafka's key).", section="storage"),
    Setting("tidelog.remote.storage.endpoint", "tidelog_remote_storage_endpoint", str, "",
            "The S3-compatible store's URL (http(s)://host:port); empty: AWS S3 of the region.",
            section="storage"),
    Setting("tidelog.remote.storage.bucket", "tidelog_remote_storage_bucket", str, "",
            "The bucket segments go to (required with remote.log.storage.system.enable).",
            section="storage"),
    Setting("tidelog.remote.storage.prefix", "tidelog_remote_storage_prefix", str, "tidelog",
            "Key prefix in the bucket; each partition is <prefix>/<topic>-<partition>/.",
            section="storage"),
    Setting("tidelog.remote.storage.region", "tidelog_remote_storage_region", str, "us-east-1",
            "The region requests are signed for (SigV4).", section="storage"),
    Setting("tidelog.remote.storage.credentials.file", "tidelog_remote_storage_credentials_file",
            str, "", "An AWS credentials file ([default] aws_access_key_id, "
            "aws_secret_access_key); empty: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the "
            "environment, else boto3's default chain.", section="storage"),
    Setting("tidelog.remote.storage.path.style", "tidelog_remote_storage_path_style", bool, True,
            "Address buckets as endpoint/bucket/key (S3-compatible servers need it); false: "
            "bucket.endpoint/key (virtual-hosted, AWS).", section="storage"),
    Setting("tidelog.remote.storage.threads", "tidelog_remote_storage_threads", int, 8,
            "Store calls in flight at once (worker threads apart from the request path's).",
            low=1, high=256, section="storage"),
    # Reads below the local log start (docs/tiered-reads.md).
    Setting("remote.log.reader.threads", "remote_log_reader_threads", int, 10,
            "Threads reading the object store for fetches and time lookups at once, apart "
            "from the request path's (Kafka's key and default).", low=1, high=256,
            section="storage"),
    Setting("tidelog.remote.fetch.timeout.ms", "tidelog_remote_fetch_timeout_ms", int, 10000,
            "How long one read below the local log start may wait for the store before its "
            "partition is answered REMOTE_STORAGE_ERROR (Kafka: KAFKA_STORAGE_ERROR).",
            low=1, section="storage"),
    Setting("tidelog.remote.cache.bytes", "tidelog_remote_cache_bytes", int, 1 << 30,
            "Disk cap of the chunk cache of remote segments (<data dir>/remote-cache, wiped "
            "at start).", low=1 << 20, section="storage"),
    Setting("tidelog.remote.cache.chunk.bytes", "tidelog_remote_cache_chunk_bytes", int,
            1 << 20, "Bytes of one ranged GET of a remote segment (aligned chunks).",
            low=4096, high=1 << 30, section="storage"),
    Setting("tidelog.remote.index.cache.bytes", "tidelog_remote_index_cache_bytes", int,
            64 << 20, "Memory cap of the remote segments' offset and time indexes kept parsed.",
            low=1 << 16, section="storage"),
    Setting("remote.log.manager.task.interval.ms", "remote_log_manager_task_interval_ms", int,
            30000, "How often each tiered partition is checked for segments to upload and "
            "local or remote segments to delete (Kafka's key and default).",
            low=1, section="storage"),
    # Kafka's default is 10 threads; each upload reads a whole segment from disk, and two
    # keep a small machine's disk and uplink busy without starving its produce path.
    Setting("remote.log.manager.copier.thread.pool.size",
            "remote_log_manager_copier_thread_pool_size", int, 2,
            "Segments uploaded at once, broker-wide.", low=1, high=64, section="storage"),
    Setting("remote.log.manager.copy.max.bytes.per.second",
            "remote_log_manager_copy_max_bytes_per_second", int, LONG_MAX,
            "Upload bandwidth of the broker, a token bucket over every upload (Kafka's key; "
            "default: unlimited).", low=1, section="storage"),
    Setting("remote.log.manager.task.retry.backoff.ms", "remote_log_manager_task_retry_backoff_ms",
            int, 500, "First wait after a failed upload or remote deletion; doubled per "
            "failure (Kafka's key and default).", low=1, section="storage"),
    Setting("remote.log.manager.task.retry.backoff.max.ms",
            "remote_log_manager_task_retry_backoff_max_ms", int, 30000,
            "Longest wait between retries (Kafka's key and default).", low=1, section="storage"),
    # Kafka's default is unlimited; a finite one keeps one host from taking every slot.
    Setting("max.connections.per.ip", "max_connections_per_ip", int, 1000,
            "Connections from one client address beyond this are closed at once.",
            low=1, high=1_000_000, section="connections"),
)  # fmt: skip
# Keys that choose the data directory; they are not BrokerConfig fields.
_DATA_DIR_KEYS = ("log.dirs", "log.dir")

# Every broker-level key that is not a topic synonym.
BROKER_CONFIG_DEFS: dict[str, Setting] = settings_by_name((*BROKER_SETTINGS, *CLEANER_SETTINGS))

# Every broker key that sets a topic default: name -> the topic key it feeds.
TOPIC_SYNONYMS: dict[str, str] = {
    syn.name: d.name for d in TOPIC_CONFIG_DEFS.values() for syn in d.synonyms
}
VALID_KEYS: frozenset[str] = frozenset(BROKER_CONFIG_DEFS) | frozenset(TOPIC_SYNONYMS)


def suggest_key(name: str, candidates: Iterable[str] = VALID_KEYS) -> str | None:
    """The closest valid key to a misspelt one (difflib), or None."""
    pool = sorted(candidates)
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    if not matches and not name.startswith("log."):
        matches = difflib.get_close_matches("log." + name, pool, n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_key_error(name: str, candidates: Iterable[str] = VALID_KEYS) -> InvalidConfig:
    hint = suggest_key(name, candidates)
    tail = f" (did you mean {hint!r}?)" if hint else ""
    return InvalidConfig(f"unknown config key {name!r}{tail}")


def parse_properties(text: str, source: str = "<config>") -> dict[str, str]:
    """Parse Java `.properties` text: `key=value`, `key: value` or `key value` lines.

    `#` and `!` start comments, a trailing backslash continues a line. Enough of
    the format for Kafka's `server.properties`; values stay strings.
    """
    props: dict[str, str] = {}
    logical: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip() if not logical else raw_line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry, logical = "".join(logical), []
        key, value = _split_property(entry)
        if not key:
            raise InvalidConfig(f"{source}: cannot parse line {raw_line.strip()!r}")
        props[key] = value
    return props


def _split_property(entry: str) -> tuple[str, str]:
    for i, ch in enumerate(entry):
        if ch in "=:" or ch.isspace():
            key = entry[:i].strip()
            rest = entry[i:].lstrip()
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
            return key, rest.strip()
    return entry.strip(), ""


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """`--set key=value` items to a dict; a missing `=` names the item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidConfig(f"--set {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def _check_security(values: Mapping[str, Any]) -> None:
    """Settings that only make sense together (TLS needs a certificate and key, ...)."""
    tls = any(s.protocol.tls for s in parse_listeners(values["listeners"]))
    if (tls or values["metrics_ssl_enable"]) and not (
        values["ssl_certfile"] and values["ssl_keyfile"]
    ):
        raise InvalidConfig("ssl.certfile: a TLS listener needs ssl.certfile and ssl.keyfile")
    if values["ssl_client_auth"] != "none" and not values["ssl_cafile"]:
        raise InvalidConfig("ssl.cafile: ssl.client.auth needs the CA of client certificates")


def authenticates(spec: ListenerSpec, ssl_client_auth: str) -> bool:
    """Whether every client of this listener proves who it is (SASL, or a required
    client certificate)."""
    return spec.protocol.sasl or (spec.protocol.tls and ssl_client_auth == "required")


def _check_anonymous_port(values: Mapping[str, Any], kafka_listen: tuple[str, int] | None) -> None:
    """Refuse the open door nobody asked for: `--kafka-listen` serves anonymous clients in
    plaintext, and beside listeners that authenticate, with the authorizer off, those
    clients may do everything the logged-in ones may."""
    if kafka_listen is None or values["authorizer"] == "on":
        return
    if values["kafka_listen_anonymous_enable"]:
        return
    specs = parse_listeners(values["listeners"])
    if not any(authenticates(spec, values["ssl_client_auth"]) for spec in specs):
        return
    host, port = kafka_listen
    raise InvalidConfig(
        f"kafka.listen.anonymous.enable: --kafka-listen {host}:{port} serves anonymous "
        "Kafka clients in plaintext beside listeners that authenticate, and authorizer=off "
        "lets them do anything. Set authorizer=on (they are then User:ANONYMOUS, checked "
        "against the ACLs), drop --kafka-listen (Kafka clients can use the SASL listeners), "
        "or set kafka.listen.anonymous.enable=true if an open port is meant."
    )


def parse_host_port(text: str, option: str) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`, or `:PORT` for all interfaces) to a tuple."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise InvalidConfig(f"{option}: expected HOST:PORT, got {text!r}")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError as exc:
        raise InvalidConfig(f"{option}: port must be a number, got {port_text!r}") from exc
    if not 0 <= port <= 65535:
        raise InvalidConfig(f"{option}: port must be in 0..65535, got {port}")
    return host, port


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The validated broker configuration. Field names are Kafka's, in snake case, units last."""

    data_dir: Path
    listen: tuple[str, int] = DEFAULT_LISTEN
    metrics_listen: tuple[str, int] = DEFAULT_METRICS_LISTEN
    log_config: LogConfig = field(default_factory=LogConfig)
    # Explicitly given keys and their text, for describe_configs and `check-config`.
    props: Mapping[str, str] = field(default_factory=dict)
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    socket_request_max_bytes: int = 104857600
    connections_max_idle_ms: int = 600000
    max_connections: int = 1000
    socket_request_read_timeout_ms: int = 30000
    queued_max_request_bytes: int = 536870912
    log_retention_check_interval_ms: int = 300000
    log_initial_task_delay_ms: int = 30000
    log_flush_scheduler_interval_ms: int = LONG_MAX
    log_flush_offset_checkpoint_interval_ms: int = 60000
    log_flush_start_offset_checkpoint_interval_ms: int = 60000
    offsets_topic_segment_bytes: int = 104857600
    producer_id_expiration_check_interval_ms: int = 600000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 1000
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    node_id: int = 1
    advertised_listeners: str = ""
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transactional_id_expiration_ms: int = 604800000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    transaction_state_log_segment_bytes: int = 104857600
    kafka_listen: tuple[str, int] | None = None  # a port for Kafka clients only
    listeners: str = ""
    sasl_enabled_mechanisms: frozenset[str] = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    ssl_client_auth: str = "none"
    metrics_ssl_enable: bool = False
    metrics_bearer_token_file: str = ""
    metrics_name_labels: str = "auto"
    console_enable: str = "auto"
    console_session_timeout_ms: int = 1800000
    authorizer: str = "off"
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    connection_failed_authentication_delay_ms: int = 100
    kafka_listen_anonymous_enable: bool = False
    max_connections_per_ip: int = 1000
    sasl_server_max_receive_size: int = 524288
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    remote_log_storage_system_enable: bool = False
    tidelog_remote_storage_endpoint: str = ""
    tidelog_remote_storage_bucket: str = ""
    tidelog_remote_storage_prefix: str = "tidelog"
    tidelog_remote_storage_region: str = "us-east-1"
    tidelog_remote_storage_credentials_file: str = ""
    tidelog_remote_storage_path_style: bool = True
    tidelog_remote_storage_threads: int = 8
    remote_log_reader_threads: int = 10
    tidelog_remote_fetch_timeout_ms: int = 10000
    tidelog_remote_cache_bytes: int = 1 << 30
    tidelog_remote_cache_chunk_bytes: int = 1 << 20
    tidelog_remote_index_cache_bytes: int = 64 << 20
    remote_log_manager_task_interval_ms: int = 30000
    remote_log_manager_copier_thread_pool_size: int = 2
    remote_log_manager_copy_max_bytes_per_second: int = LONG_MAX
    remote_log_manager_task_retry_backoff_ms: int = 500
    remote_log_manager_task_retry_backoff_max_ms: int = 30000
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)

    @property
    def listener_specs(self) -> tuple[ListenerSpec, ...]:
        """Every client listener; the first one's address is `listen`."""
        specs = parse_listeners(self.listeners)
        if not specs:
            return (ListenerSpec(SecurityProtocol.PLAINTEXT, *self.listen),)
        first = specs[0]
        return (ListenerSpec(first.protocol, *self.listen), *specs[1:])

    @property
    def authorizer_enabled(self) -> bool:
        return self.authorizer == "on"

    @property
    def authentication_enabled(self) -> bool:
        """Whether some clients must prove who they are, or the authorizer checks them."""
        client_auth = self.ssl_client_auth
        return self.authorizer_enabled or any(
            authenticates(spec, client_auth) for spec in self.listener_specs
        )

    @property
    def metrics_name_labels_shown(self) -> bool:
        """`metrics.name.labels` resolved: with `auto`, names are shown on an open broker,
        or when the token guards /metrics (docs/security.md, "Metrics endpoint")."""
        if self.metrics_name_labels != "auto":
            return self.metrics_name_labels == "on"
        return bool(self.metrics_bearer_token_file) or not self.authentication_enabled

    @property
    def super_user_set(self) -> frozenset[str]:
        return split_super_users(self.super_users)

    @property
    def log_cleaner_enable(self) -> bool:
        """`log.cleaner.enable`, the cleaner key most callers ask about."""
        return self.cleaner.enable

    def __post_init__(self) -> None:
        self.group_config  # noqa: B018 - InvalidConfig now for min > max session timeout
        self.remote_store_settings  # noqa: B018 - InvalidConfig now for a bad bucket/endpoint
        if self.tidelog_remote_cache_bytes < self.tidelog_remote_cache_chunk_bytes:
            raise InvalidConfig(
                f"tidelog.remote.cache.bytes ({self.tidelog_remote_cache_bytes}) must hold "
                f"one chunk (tidelog.remote.cache.chunk.bytes, "
                f"{self.tidelog_remote_cache_chunk_bytes})"
            )

    @property
    def remote_store_settings(self) -> RemoteStoreSettings | None:
        """The object store of tiered storage (credentials not resolved yet: the broker
        reads the file or the environment at start), or None when it is off."""
        if not self.remote_log_storage_system_enable:
            return None
        if not self.tidelog_remote_storage_bucket:
            raise InvalidConfig(
                "tidelog.remote.storage.bucket: remote.log.storage.system.enable=true "
                "needs a bucket"
            )
        return RemoteStoreSettings(
            bucket=self.tidelog_remote_storage_bucket,
            endpoint=self.tidelog_remote_storage_endpoint,
            prefix=self.tidelog_remote_storage_prefix,
            region=self.tidelog_remote_storage_region,
            path_style=self.tidelog_remote_storage_path_style,
        )

    @property
    def group_config(self) -> GroupConfig:
        """The group coordinator's settings (checked together: min <= max session)."""
        return GroupConfig(
            group_min_session_timeout_ms=self.group_min_session_timeout_ms,
            group_max_session_timeout_ms=self.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=self.group_initial_rebalance_delay_ms,
            group_max_size=self.group_max_size,
            offsets_retention_minutes=self.offsets_retention_minutes,
            offsets_retention_check_interval_ms=self.offsets_retention_check_interval_ms,
        )

    @property
    def txn_config(self) -> TxnConfig:
        """The transaction coordinator's settings."""
        return TxnConfig(
            max_timeout_ms=self.transaction_max_timeout_ms,
            abort_timed_out_interval_ms=(
                self.transaction_abort_timed_out_transaction_cleanup_interval_ms
            ),
            id_expiration_ms=self.transactional_id_expiration_ms,
            remove_expired_interval_ms=(
                self.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            log_segment_bytes=self.transaction_state_log_segment_bytes,
        )

    @property
    def message_max_bytes(self) -> int:
        """Broker default for a batch's size (`message.max.bytes`)."""
        return self.log_config.max_message_bytes

    @classmethod
    def from_props(
        cls,
        props: Mapping[str, object],
        *,
        data_dir: str | Path | None = None,
        listen: tuple[str, int] | None = None,
        metrics_listen: tuple[str, int] = DEFAULT_METRICS_LISTEN,
        kafka_listen: tuple[str, int] | None = None,
    ) -> BrokerConfig:
        """Validate Kafka-named `props`; InvalidConfig names the first bad key.

        `listen` (the `--listen` flag) is the first listener's address; without it,
        the first entry of `listeners`, else DEFAULT_LISTEN.
        """
        text_props = {str(k): str(v) if not isinstance(v, str) else v for k, v in props.items()}
        for name in text_props:
            if name not in VALID_KEYS:
                raise unknown_key_error(name)
        values: dict[str, Any] = {
            d.attr: d.parse(props[d.name]) if d.name in props else d.default
            for d in BROKER_SETTINGS
        }
        log_dirs = values.pop("log_dirs") or values.pop("log_dir")
        values.pop("log_dir", None)
        chosen = str(data_dir) if data_dir is not None else log_dirs
        if not chosen:
            raise InvalidConfig("log.dirs: no data directory (pass --data-dir or set log.dirs)")
        if "," in chosen:
            raise InvalidConfig(f"log.dirs: Tidelog uses one data directory, got {chosen!r}")
        synonym_props = {k: v for k, v in props.items() if k in TOPIC_SYNONYMS}
        log_config = LogConfig.from_broker_props(synonym_props)
        if listen is None:
            specs = parse_listeners(values["listeners"])
            listen = (specs[0].host, specs[0].port) if specs else DEFAULT_LISTEN
        _check_security(values)
        _check_anonymous_port(values, kafka_listen)
        return cls(
            data_dir=Path(chosen),
            listen=listen,
            metrics_listen=metrics_listen,
            kafka_listen=kafka_listen,
            log_config=log_config,
            cleaner=CleanerConfig.from_props(props),
            props=text_props,
            **values,
        )

    @classmethod
    def from_sources(
        cls,
        *,
        config_file: str | Path | None = None,
        overrides: Iterable[str] = (),
        data_dir: str | Path | None = None,
        listen: str | None = None,
        metrics_listen: str | None = None,
        kafka_listen: str | None = None,
    ) -> BrokerConfig:
        """Defaults < `config_file` (server.properties format) < `--set` overrides."""
        props: dict[str, str] = {}
        if config_file is not None:
            path = Path(config_file)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise InvalidConfig(f"--config {path}: {exc.strerror or exc}") from exc
            props.update(parse_properties(text, str(path)))
        props.update(parse_overrides(overrides))
        return cls.from_props(
            props,
            data_dir=data_dir,
            listen=parse_host_port(listen, "--listen") if listen else None,
            metrics_listen=(
                parse_host_port(metrics_listen, "--metrics-listen")
                if metrics_listen
                else DEFAULT_METRICS_LISTEN
            ),
            kafka_listen=parse_host_port(kafka_listen, "--kafka-listen") if kafka_listen else None,
        )

    def topic_key_source(self, topic_key: str) -> str:
        """`broker` if a broker key set this topic key's default, else `default`."""
        definition = TOPIC_CONFIG_DEFS[topic_key]
        return "broker" if any(s.name in self.props for s in definition.synonyms) else "default"

    def describe_topic_configs(
        self, overrides: Mapping[str, object]
    ) -> dict[str, DescribeConfigsConfigAnswer]:
        """Every topic key with its effective value and source (`default`, `broker`, `topic`)."""
        effective = LogConfig.from_props(overrides, self.log_config).to_props()
        return {
            name: {
                "value": value,
                "source": "topic" if name in overrides else self.topic_key_source(name),
            }
            for name, value in effective.items()
        }


check_fields(BrokerConfig, [d for d in BROKER_SETTINGS if d.name not in _DATA_DIR_KEYS])
