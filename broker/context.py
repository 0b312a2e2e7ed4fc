"""What every handler may use (`BrokerContext`), and what a connection holds.

The handlers (broker/handlers/) see only this context and typed request bodies; the
connection (broker/connection.py) keeps its bookkeeping in a `ConnectionState` that
the context counts. Both import this module and never each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import trio

from broker.config import BrokerConfig
from broker.group_service import GroupService
from broker.groupcommit import GroupCommitter
from broker.longpoll import AppendNotifier
from broker.membudget import MemoryBudget
from broker.metrics import BrokerMetrics
from broker.offsets_log import OffsetsLog
from broker.quotas.limits import ClientQuotas
from broker.quotas.store import QuotaStore
from broker.security.service import BrokerSecurity
from protocol.clock import ClockMs, wall_clock_ms
from storage.manager import LogManager
from storage.remote.remote_reader import RemoteReader


@dataclass
class ConnectionState:
    """Per-connection bookkeeping shared by the connection's three tasks and the broker."""

    conn_id: int
    peer: str
    inflight: int = 0
    close_reason: str = "eof"
    last_activity: float = field(default_factory=trio.current_time)
    queued_bytes: int = 0  # encoded responses waiting for the writer
    held_bytes: int = 0  # what this connection holds in the broker-wide memory budget
    room: trio.Event = field(default_factory=trio.Event)  # set when queued_bytes drops
    reader_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    local: tuple[str, int] | None = None  # the address the client connected to
    protocol: str = "tidelog"  # which codec serves it (broker.wirecodec), once sniffed
    muted_until: float = 0.0  # trio time a client quota's throttle ends (broker/kafka/throttle.py)


@dataclass
class BrokerContext:
    """What every handler may use: config, storage and the broker's shared services."""

    config: BrokerConfig
    manager: LogManager
    notifier: AppendNotifier
    committer: GroupCommitter
    metrics: BrokerMetrics
    connections: dict[int, ConnectionState] = field(default_factory=dict)
    inflight_total: int = 0
    clock_ms: ClockMs = wall_clock_ms  # the broker's one wall clock (protocol/clock.py)
    memory: MemoryBudget = field(init=False)  # queued.max.request.bytes, broker-wide
    groups: GroupService = field(init=False)  # the group coordinator (broker/group_service.py)
    quotas: ClientQuotas = field(init=False)  # client quotas (broker/quotas/)
    # TLS, SASL and ACLs (broker/security/); None: none of them (bare test contexts).
    security: BrokerSecurity | None = None
    # Reads below the local log start (tiered storage); None: remote storage is off.
    remote_reader: RemoteReader | None = None

    def __post_init__(self) -> None:
        self.memory = MemoryBudget(self.config.queued_max_request_bytes)
        # Read at scrape time: a request changes it twice, a scrape is rare.
        self.metrics.get("tidelog_inflight_requests").set_function(lambda: self.inflight_total)
        offsets_log = OffsetsLog(self.manager, self.config.offsets_topic_segment_bytes)
        self.groups = GroupService(self.config.group_config, offsets_log, self.clock_ms)
        self.quotas = ClientQuotas(
            QuotaStore(self.config.data_dir),
            samples=self.config.quota_window_num,
            window_ms=self.config.quota_window_size_seconds * 1000,
        )

    def connection_opened(self, state: ConnectionState) -> None:
        self.connections[state.conn_id] = state
        self.metrics.get("tidelog_connections").set(len(self.connections))
        self.metrics.get("tidelog_connections_opened").inc()

    def inflight_changed(self, state: ConnectionState, delta: int) -> None:
        """A request was read (+1) or answered (-1) on `state`'s connection."""
        state.inflight += delta
        self.inflight_total += delta

    def connection_closed(self, state: ConnectionState) -> None:
        self.memory.release(state.held_bytes)  # whatever its queues still held
        state.held_bytes = 0
        self.inflight_changed(state, -state.inflight)
        self.connections.pop(state.conn_id, None)
        self.metrics.get("tidelog_connections").set(len(self.connections))
        self.metrics.get("tidelog_connections_closed").labels(state.close_reason).inc()

    def request_finished(
        self, api: str, error: str | None, duration_s: float, *, protocol: str = "tidelog"
    ) -> None:
        self.metrics.request_finished(api, error, duration_s, protocol=protocol)

    def drain(self) -> None:
        """Stop reading new requests on every connection; queued ones are still answered."""
        for state in list(self.connections.values()):
            state.reader_scope.cancel()
        self.notifier.close()


# A request body as a codec hands it over: validated against its API's schema, the keys
# it declares with defaults filled in. Each handler takes its API's own TypedDict of
# protocol/api_types.py (generated from the schema table), which is this dict at run time.
Body = dict[str, Any]
# An answer body of any API, before a codec turns it into bytes. Each handler returns
# its API's TypedDict; to mypy a TypedDict is a Mapping (never a `dict[str, Any]`).
Answer = Mapping[str, Any]

A = TypeVar("A", bound=Answer, covariant=True)


@dataclass(frozen=True, slots=True)
class Deferred(Generic[A]):
    """A handler result that needs more waiting (an `acks: -1` fsync).

    The connection completes it beside the requests that follow and writes its
    response in its place, so pipelined durable produces share fsync rounds.
    """

    finish: Callable[[], Awaitable[A]]


# Every API's handler as the dispatch table holds it: the context and a validated body
# in, an answer (None: send nothing, as for `acks: 0`) or a Deferred out. No handler
# sees bytes or frames. Each row's own signature is typed with its API's request and
# answer (`produce(ctx, body: ProduceRequest) -> ProduceAnswer | Deferred[...] | None`);
# the table erases them to this, and tests/broker/test_api_types.py checks every row's
# annotations against protocol/api_types.API_TYPES.
Handler = Callable[[BrokerContext, Any], Awaitable[Answer | Deferred[Answer] | None]]
