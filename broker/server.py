"""The broker daemon: `serve_broker` (trio) and `run_serve` (what `tidelog serve` calls).

`serve_broker` binds the metrics listener first (so `/readyz` answers 503 while
recovery runs), opens the `LogManager` in a worker thread (recovery can take
seconds), binds the client listener, starts every background task in one
nursery and reports a `BrokerHandle` through `task_status.started`. It returns
after a graceful shutdown, or closes the logs cleanly when cancelled.

Graceful shutdown (first SIGTERM/SIGINT, or `BrokerHandle.request_shutdown()`):
mark not ready, stop accepting, stop reading new requests, answer the ones
already read (long polls return at once), then flush, write checkpoints and the
clean-shutdown marker (`LogManager.close()`). A second signal exits at once.
"""

from __future__ import annotations

import argparse
import errno
import functools
import gc
import ipaddress
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trio

from broker import offload, remote_read
from broker.codecs import codec_named
from broker.component_metrics import component_samples
from broker.config import BrokerConfig, authenticates
from broker.connection import serve_connection
from broker.console import console_for
from broker.context import BrokerContext
from broker.dispatch import SERVER_VERSION
from broker.gcwatch import GcWatch
from broker.groupcommit import FlushObserver, GroupCommitter
from broker.heartbeat import run_heartbeat
from broker.housekeeping import start_log_tasks
from broker.logging import configure_logging, get_logger
from broker.longpoll import AppendNotifier
from broker.membudget import TRIM_CHECK_INTERVAL_S
from broker.memory import limit_malloc_arenas
from broker.metrics import (
    BrokerMetrics,
    MetricsAccess,
    PartitionStats,
    Readiness,
    read_token,
    serve_metrics_http,
)
from broker.scheduler import Scheduler
from broker.sdnotify import notify
from broker.security.accept import (
    TLS_HANDSHAKE_TIMEOUT_S,
    Admission,
    client_host,
    secure_connection,
    serve_listener,
)
from broker.security.listeners import ListenerSpec, SecurityProtocol
from broker.security.service import BrokerSecurity
from broker.serve_flags import SERVE_DESCRIPTION, add_serve_arguments
from broker.tiered.start import start_tiered_storage
from broker.wirecodec import WireCodec
from compaction.service import CleanerService
from protocol.clock import ClockMs, wall_clock_ms
from protocol.errors import InvalidConfig, TidelogError
from storage.fdbudget import fd_reserve_for
from storage.manager import LogManager

log = get_logger(component="server")

# How long a graceful shutdown waits for in-flight requests before cutting
# connections; below systemd's default 90 s stop timeout.
SHUTDOWN_DRAIN_S = 30.0
# Young-generation GC threshold for the daemon: validating a 1,000-record batch
# allocates thousands of short-lived tuples, and at Python's default (700) the
# collector runs several times per batch (docs/design.md "hot paths").
GC_GEN0_THRESHOLD = 50_000
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2


class ShutdownFailed(Exception):
    """Closing the logs failed after the broker had served (e.g. a full disk): reported
    as `shutdown_failed`, not as a failed start. The cause is chained."""


@dataclass
class BrokerHandle:
    """What `serve_broker` reports once it accepts connections."""

    host: str
    port: int
    metrics_host: str
    metrics_port: int
    context: BrokerContext
    shutdown_requested: trio.Event = field(default_factory=trio.Event)
    kafka_host: str | None = None  # the --kafka-listen port, when there is one
    kafka_port: int | None = None
    # Every client listener as bound (port 0 resolved), the first being host:port.
    listeners: list[ListenerSpec] = field(default_factory=list)

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def kafka_address(self) -> tuple[str, int] | None:
        """The Kafka-only listener's address (Kafka clients may use `address` too)."""
        if self.kafka_host is None or self.kafka_port is None:
            return None
        return self.kafka_host, self.kafka_port

    def request_shutdown(self) -> None:
        """Begin a graceful shutdown; `serve_broker` returns when it is done."""
        self.shutdown_requested.set()


def _bound(listeners: list[trio.SocketListener]) -> tuple[str, int]:
    host, port = listeners[0].socket.getsockname()[:2]
    return host, port


def _partition_stats(manager: LogManager) -> Iterator[PartitionStats]:
    for topic in manager.topics():
        try:
            count = manager.partition_count(topic)
            for p in range(count):
                plog = manager.get_log(topic, p)
                yield PartitionStats(
                    topic=topic,
                    partition=p,
                    log_start_offset=plog.log_start_offset,
                    log_end_offset=plog.log_end_offset,
                    size_bytes=plog.size_bytes,
                    segments=plog.segment_count,
                    offline=int(plog.poisoned),
                )
        except TidelogError:
            continue  # deleted while we looked


async def serve_broker(
    config: BrokerConfig,
    *,
    shutdown: trio.Event | None = None,
    clock_ms: ClockMs = wall_clock_ms,
    task_status: trio.TaskStatus[BrokerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a broker until a graceful shutdown completes (or the caller cancels).

    `clock_ms` is the one wall clock: storage, retention, the cleaner and the handlers
    all read the time through it (tests pass their own).
    """
    metrics = BrokerMetrics(SERVER_VERSION)
    readiness = Readiness()
    log.info("broker_starting", data_dir=str(config.data_dir), version=SERVER_VERSION)
    security = BrokerSecurity.from_config(config, on_reload_failed=_tls_reload_failed)
    access = _metrics_access(config)
    console = console_for(config)  # the web console on the metrics listener (docs/console.md)
    metrics_host, metrics_port = config.metrics_listen
    metrics_listeners = await trio.open_tcp_listeners(metrics_port, host=metrics_host)
    metrics_addr = _bound(metrics_listeners)
    async with trio.open_nursery() as services:
        metrics_tls = _metrics_tls(config, security)
        http = (metrics_listeners, metrics, readiness, metrics_tls, access, console)
        services.start_soon(serve_metrics_http, *http)
        if security.tls is not None:
            services.start_soon(_reload_tls_on_sighup, security)
        manager = await _open_log_manager(config, clock_ms)
        # Retention, delayed file deletion, flush.ms and checkpoints (broker/housekeeping.py).
        scheduler = Scheduler(services)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=clock_ms)
        cleaner = start_log_cleaner(scheduler, manager, config, clock_ms)
        tiered = await start_tiered_storage(scheduler, manager, config, metrics, clock_ms)
        readiness.recovered = True
        metrics.add_partition_source(lambda: _partition_stats(manager))
        ctx = BrokerContext(
            config=config,
            manager=manager,
            notifier=AppendNotifier(),
            committer=GroupCommitter(services, on_flush=_flush_observer(metrics)),
            metrics=metrics,
            clock_ms=clock_ms,
            security=security,
        )
        # Tiered storage's reads below the local log start (docs/tiered-reads.md).
        remote_read.set_threads(config.remote_log_reader_threads)
        ctx.remote_reader = await offload.to_worker(remote_read.open_reader, config)
        await services.start(ctx.groups.serve)  # group coordinator: loaded, then ticking
        if console is not None:
            console.attach(ctx, cleaner)
        scheduler.schedule(
            "memory-trim",
            lambda: ctx.memory.trim_if_due(trio.current_time()),
            TRIM_CHECK_INTERVAL_S,
            TRIM_CHECK_INTERVAL_S,
        )
        metrics.add_statistics_source(lambda: component_samples(ctx, tasks, cleaner, readiness))
        services.start_soon(
            run_heartbeat, metrics.get("tidelog_event_loop_lateness_seconds").observe
        )
        gc_pauses = metrics.get("tidelog_gc_pause_seconds")
        gc_watch = GcWatch(lambda generation, s: gc_pauses.labels(str(generation)).observe(s))
        try:
            await _serve(ctx, readiness, metrics_addr, shutdown, task_status)
        finally:
            gc_watch.close()
            with trio.CancelScope(shield=True):
                ctx.groups.close()  # no coordinator tick may write while the logs close
                cleaner.request_stop()  # running cleanings give up at their next chunk
                if tiered is not None:
                    tiered.stop()  # so do uploads
                if ctx.remote_reader is not None:
                    ctx.remote_reader.close()  # remote reads still running fail, retriably
                await scheduler.aclose()  # no task may touch the logs while they close
                try:
                    await offload.to_worker(manager.close)
                except (TidelogError, OSError) as exc:
                    raise ShutdownFailed(str(exc)) from exc
                log.info("shutdown_complete")
            services.cancel_scope.cancel()


async def _open_log_manager(config: BrokerConfig, clock_ms: ClockMs) -> LogManager:
    """Open (and recover) the data directory's logs in a worker thread."""
    manager = LogManager(
        config.data_dir,
        config.log_config,
        clock_ms=clock_ms,
        fd_reserve=fd_reserve_for(config.max_connections),
        remote_storage_system_enable=config.remote_log_storage_system_enable,
    )
    started = time.perf_counter()
    await offload.to_worker(manager.open)
    log.info("logs_loaded", topics=len(manager.topics()), duration_s=_since(started))
    return manager


# Shortest period of a cleaner worker's task, so `log.cleaner.backoff.ms=0` cannot spin.
CLEANER_MIN_PERIOD_S = 0.05


def start_log_cleaner(
    scheduler: Scheduler,
    manager: LogManager,
    config: BrokerConfig,
    clock_ms: ClockMs = wall_clock_ms,
) -> CleanerService:
    """The log cleaner (compaction/service.py): one periodic task per worker thread.

    Each run cleans in `trio.to_thread` while some compacted log is eligible, then
    waits `log.cleaner.backoff.ms`; with `log.cleaner.enable=false` there are no workers.
    """
    service = CleanerService(
        config.cleaner,
        config.data_dir,
        manager.all_logs,
        clock_ms=clock_ms,
    )
    period_s = max(service.backoff_s, CLEANER_MIN_PERIOD_S)
    for index in range(len(service.workers)):

        async def run(index: int = index) -> None:
            # Not through broker.offload: log.cleaner.threads sizes these, and a pass
            # runs for minutes; they must not hold request workers (trio's limiter).
            await trio.to_thread.run_sync(service.run_worker, index)

        scheduler.schedule(f"log-cleaner-{index}", run, period_s, period_s)
    log.info(
        "log_cleaner_started",
        workers=len(service.workers),
        backoff_ms=config.cleaner.backoff_ms,
    )
    return service


async def _serve(
    ctx: BrokerContext,
    readiness: Readiness,
    metrics_addr: tuple[str, int],
    shutdown: trio.Event | None,
    task_status: trio.TaskStatus[BrokerHandle],
) -> None:
    """Accept connections until a shutdown is requested, then drain them."""
    config = ctx.config
    bound: list[tuple[ListenerSpec, list[trio.SocketListener], WireCodec | None]] = []
    for spec in config.listener_specs:
        opened = await trio.open_tcp_listeners(spec.port, host=spec.host or None)
        bound.append((ListenerSpec(spec.protocol, *_bound(opened)), opened, None))
    bound_host, bound_port = bound[0][0].host, bound[0][0].port
    handle = BrokerHandle(bound_host, bound_port, metrics_addr[0], metrics_addr[1], ctx)
    handle.listeners = [spec for spec, _, _ in bound]
    if config.kafka_listen is not None:  # Kafka clients only, plaintext (docs/kafka.md)
        kafka_host, kafka_port = config.kafka_listen
        opened = await trio.open_tcp_listeners(kafka_port, host=kafka_host)
        handle.kafka_host, handle.kafka_port = _bound(opened)
        kafka_spec = ListenerSpec(SecurityProtocol.PLAINTEXT, handle.kafka_host, handle.kafka_port)
        bound.append((kafka_spec, opened, codec_named("kafka")))
    listeners = [one for _, opened, _ in bound for one in opened]
    stop = shutdown if shutdown is not None else handle.shutdown_requested
    admission = Admission(config.max_connections, config.max_connections_per_ip)
    async with trio.open_nursery() as connections:
        accept_scope = trio.CancelScope()

        async def accept() -> None:
            with accept_scope:
                async with trio.open_nursery() as acceptors:
                    for spec, opened, codec in bound:
                        on_connection = functools.partial(
                            _on_connection, ctx, admission, spec, codec
                        )
                        for listener in opened:
                            acceptors.start_soon(
                                serve_listener,
                                listener,
                                on_connection,
                                connections,
                                functools.partial(_accept_exhausted, ctx, spec),
                            )

        connections.start_soon(accept)
        readiness.listening = True
        task_status.started(handle)
        notify(f"READY=1\nSTATUS=serving on {bound_host}:{bound_port}")
        log.info(
            "broker_ready",
            listen=f"{bound_host}:{bound_port}",
            protocols=["tidelog", "kafka"],  # both on `listen`, told apart per connection
            kafka_listen=_address_text(handle.kafka_address),
            metrics_listen=f"{metrics_addr[0]}:{metrics_addr[1]}",
            port=bound_port,
            kafka_port=handle.kafka_port,
            metrics_port=handle.metrics_port,
            node_id=config.node_id,
            advertised_listeners=config.advertised_listeners or None,
            listeners=[str(spec) for spec in handle.listeners],
            pid=os.getpid(),
        )
        _warn_if_exposed(config)
        _warn_if_anonymous(config, handle)
        await _wait_any(stop, handle.shutdown_requested)
        handle.shutdown_requested.set()
        log.info("shutdown_started", connections=len(ctx.connections))
        notify("STOPPING=1")
        readiness.shutting_down = True
        accept_scope.cancel()
        for listener in listeners:
            await listener.aclose()
        ctx.drain()
        connections.cancel_scope.deadline = trio.current_time() + SHUTDOWN_DRAIN_S


def _address_text(address: tuple[str, int] | None) -> str | None:
    return None if address is None else f"{address[0]}:{address[1]}"


async def _on_connection(
    ctx: BrokerContext,
    admission: Admission,
    spec: ListenerSpec,
    codec: WireCodec | None,
    stream: trio.SocketStream,
) -> None:
    """One accepted connection: admission (counted from here, before TLS), then TLS and
    the session, then the protocol (`codec` None: sniffed from the first bytes)."""
    host = client_host(stream)
    refused = admission.admit(host)
    if refused is not None:
        ctx.metrics.get("tidelog_connections_closed").labels(refused).inc()
        await trio.aclose_forcefully(stream)
        return
    try:
        await _secure_and_serve(ctx, spec, codec, stream)
    finally:
        admission.leave(host)


async def _secure_and_serve(
    ctx: BrokerContext, spec: ListenerSpec, codec: WireCodec | None, stream: trio.SocketStream
) -> None:
    tls = ctx.security.tls if ctx.security is not None else None
    try:
        secured = await secure_connection(
            stream, spec, tls, on_handshake_failed=functools.partial(_handshake_failed, ctx)
        )
    except Exception:
        # A bug here must cost this connection only: an exception out of a
        # connection's task would take the whole broker down with it.
        log.exception("accept_failed", listener=str(spec))
        await trio.aclose_forcefully(stream)
        return
    if secured is not None:
        await serve_connection(secured, ctx, codec=codec)


def _accept_exhausted(ctx: BrokerContext, spec: ListenerSpec, exc: OSError, failures: int) -> None:
    log.error(
        "accept_backing_off",
        listener=str(spec),
        reason=errno.errorcode.get(exc.errno or 0, str(exc.errno)),
        failures=failures,
        connections=len(ctx.connections),
    )


def _handshake_failed(ctx: BrokerContext, host: str, exc: BaseException) -> None:
    ctx.metrics.get("tidelog_tls_handshake_failures").inc()
    cause = exc.__cause__ or exc  # trio wraps the ssl module's error
    log.info(
        "tls_handshake_failed", client=host, reason=type(cause).__name__, detail=str(cause)[:200]
    )


def _tls_reload_failed(exc: Exception) -> None:
    log.warning("tls_reload_failed", reason=str(exc)[:200])


def _metrics_access(config: BrokerConfig) -> MetricsAccess:
    """Who may scrape /metrics and whether it names topics and groups; InvalidConfig
    now if the token file cannot be read (a scrape would only ever get 401)."""
    token_file = (
        Path(config.metrics_bearer_token_file) if config.metrics_bearer_token_file else None
    )
    if token_file is not None:
        try:
            read_token(token_file)
        except (OSError, ValueError) as exc:
            raise InvalidConfig(f"metrics.bearer.token.file: {exc}") from exc
    names = config.metrics_name_labels_shown
    if not names and config.metrics_name_labels == "auto":
        log.info(
            "metrics_name_labels_off",
            reason="authentication is on and /metrics is open to anyone who reaches it",
            hint="set metrics.bearer.token.file (or metrics.name.labels=on) to label "
            "series with topic and group names",
        )
    return MetricsAccess(names=names, token_file=token_file)


def _metrics_tls(
    config: BrokerConfig, security: BrokerSecurity
) -> Callable[[trio.SocketStream], Awaitable[trio.abc.Stream | None]] | None:
    """TLS for the metrics endpoint when `metrics.ssl.enable` (same certificate)."""
    tls = security.tls
    if not config.metrics_ssl_enable or tls is None:
        return None

    async def wrap(stream: trio.SocketStream) -> trio.abc.Stream | None:
        ssl_stream = trio.SSLStream(stream, tls.context(), server_side=True)
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await ssl_stream.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError, OSError):
            await trio.aclose_forcefully(stream)
            return None
        return ssl_stream

    return wrap


async def _reload_tls_on_sighup(security: BrokerSecurity) -> None:
    """SIGHUP: check the certificate files now (they are also checked every second)."""
    assert security.tls is not None
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            security.tls.request_reload()
            log.info("tls_reload_requested")


def _warn_if_anonymous(config: BrokerConfig, handle: BrokerHandle) -> None:
    """Name each port that serves anonymous clients beside listeners that authenticate,
    with the authorizer off (Kafka allows it; the start-up check refuses it for
    --kafka-listen unless kafka.listen.anonymous.enable is set)."""
    if config.authorizer_enabled:
        return
    client_auth = config.ssl_client_auth
    if not any(authenticates(spec, client_auth) for spec in handle.listeners):
        return
    open_ports = [
        (f"listeners[{i}]" if i else "listen", spec)
        for i, spec in enumerate(handle.listeners)
        if not authenticates(spec, client_auth)
    ]
    kafka = handle.kafka_address
    if kafka is not None:
        open_ports.append(("kafka_listen", ListenerSpec(SecurityProtocol.PLAINTEXT, *kafka)))
    for name, spec in open_ports:
        log.warning(
            "listener_anonymous",
            listener=name,
            address=_address_text((spec.host, spec.port)),
            reason="anonymous clients may do anything here: authorizer=off",
        )


def _warn_if_exposed(config: BrokerConfig) -> None:
    """Say so when a listener leaves loopback without TLS, SASL or the authorizer."""
    for index, spec in enumerate(config.listener_specs):
        if _is_loopback(spec.host):
            continue
        name = "listen" if index == 0 else f"listeners[{index}]"  # the first is --listen's
        if not (spec.protocol.tls or spec.protocol.sasl):
            log.warning(
                "listener_not_loopback", listener=name, host=spec.host or "*", spec=str(spec)
            )
        elif not config.authorizer_enabled:
            log.warning("listener_without_authorizer", listener=name, spec=str(spec))
    host = config.metrics_listen[0]
    if not _is_loopback(host) and not config.metrics_ssl_enable:
        log.warning("listener_not_loopback", listener="metrics_listen", host=host or "*")
    if config.kafka_listen is not None and not _is_loopback(config.kafka_listen[0]):
        # The Kafka-only port is plaintext (listeners= carries TLS and SASL for Kafka too).
        log.warning("listener_not_loopback", listener="kafka_listen", host=config.kafka_listen[0])


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


async def _wait_any(*events: trio.Event) -> None:
    """Return as soon as one of `events` is set."""
    async with trio.open_nursery() as nursery:

        async def wait_one(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait_one, event)


def _flush_observer(metrics: BrokerMetrics) -> FlushObserver:
    flush_hist = metrics.get("tidelog_log_flush_duration_seconds")
    group_hist = metrics.get("tidelog_group_commit_waiters")

    def observe(duration_s: float, waiters: int) -> None:
        flush_hist.observe(duration_s)
        group_hist.observe(waiters)

    return observe


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 6)


# --- the `tidelog serve` command ----------------------------------------------


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    """The BrokerConfig for `tidelog serve` flags (argparse namespace)."""
    return BrokerConfig.from_sources(
        config_file=getattr(args, "config", None),
        overrides=getattr(args, "set", None) or (),
        data_dir=getattr(args, "data_dir", None),
        listen=getattr(args, "listen", None),
        metrics_listen=getattr(args, "metrics_listen", None),
        kafka_listen=getattr(args, "kafka_listen", None),
    )


async def _run_with_signals(config: BrokerConfig) -> None:
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for signum in signals:
                    if not stop.is_set():
                        log.info("signal_received", signal=signal.Signals(signum).name)
                        stop.set()
                    else:
                        log.warning("second_signal_exit", signal=signal.Signals(signum).name)
                        sys.stdout.flush()
                        os._exit(128 + signum)

            nursery.start_soon(watch)
            await serve_broker(config, shutdown=stop)
            nursery.cancel_scope.cancel()


def run_serve(args: argparse.Namespace) -> int:
    """Run `tidelog serve` to completion; the process exit status."""
    try:
        config = config_from_args(args)
    except InvalidConfig as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(
        fmt=getattr(args, "log_format", None) or "auto",
        level=getattr(args, "log_level", None) or "info",
    )
    _tune_gc()
    # Before trio starts any worker thread: see broker/memory.py.
    arenas = limit_malloc_arenas()
    log.info("malloc_arenas", limit=arenas if arenas is not None else "unchanged")
    try:
        trio.run(_run_with_signals, config)
    except (TidelogError, OSError, ShutdownFailed, BaseExceptionGroup) as exc:
        cause = _first_leaf(exc)
        if isinstance(cause, ShutdownFailed):
            log.error("shutdown_failed", error=_error_code(cause.__cause__), reason=str(cause))
            return EXIT_FAILURE
        if not isinstance(cause, TidelogError | OSError):
            raise
        reason = cause.message if isinstance(cause, TidelogError) else str(cause)
        log.error("startup_failed", error=_error_code(cause), reason=reason)
        return EXIT_FAILURE
    return EXIT_OK


def _tune_gc() -> None:
    """Fewer young collections, and none of them rescanning the startup heap (whole process)."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def _error_code(exc: BaseException | None) -> str:
    return exc.code if isinstance(exc, TidelogError) else "OS_ERROR"


def _first_leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside trio's nested exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    """`python -m broker.server [serve flags]`: the daemon without the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="tidelog-serve", description=SERVE_DESCRIPTION)
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
