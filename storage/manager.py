"""The topics of one data directory: their partition logs, configs and checkpoints.

The files and the order of their writes are storage.data_dir's (`DataDir`): one
`<topic>-<partition>` directory per partition, `topics/<topic>.json` per topic, the
two offset checkpoints, the lock and the clean-shutdown marker. Descriptors are a
budget (storage.fdbudget): partitions
keep none for good (storage.fdcache), so every accepted topic loads at start; a
topic is refused up front only when the process has no descriptors left at all.

Thread safety: topic creation, deletion and config changes hold `_lock`;
`get_log` and friends read a dict that is replaced, not mutated. Each Log is
thread-safe on its own.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from protocol.clock import wall_clock_ms
from protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    StorageError,
    TidelogError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.settings import INT64_MAX, config_text
from storage.config import (
    REMOTE_DISABLED_MESSAGE,
    REMOTE_TURN_OFF_MESSAGE,
    TOPIC_CONFIG_DEFS,
    LogConfig,
)
from storage.data_dir import MAX_PARTITIONS_PER_TOPIC, DataDir
from storage.fdbudget import (
    FD_RESERVE,
    FDS_PER_ACTIVE_SEGMENT,
    FdBudget,
    raise_nofile_limit,
    size_caches,
)
from storage.fileio import FileIO
from storage.files import (
    DeletionQueue,
    delete_marked_files,
    validate_topic_name,
)
from storage.log import Log
from storage.partition_growth import grow_topic
from storage.producer_ids import ProducerIdAllocator, ProducerIds
from storage.recovery import open_log
from storage.topic_id import ensure_partition_metadata, find_topic_id, new_topic_id

log = structlog.get_logger("tidelog.storage")


@dataclass(frozen=True, slots=True)
class StorageStatistics:
    """For broker/metrics.py: what the last start repaired and what is open now."""

    had_clean_shutdown: bool
    open_duration_s: float
    recovery_truncated_bytes: int
    fenced_segments: int
    quarantined_segments: int
    unloaded_topics: int
    topics: int
    partitions: int
    poisoned_partitions: int
    pending_deletions: int


class _Topic:
    def __init__(
        self, name: str, overrides: dict[str, str], config: LogConfig, topic_id: bytes
    ) -> None:
        self.name = name
        self.overrides = overrides
        self.config = config
        self.logs: list[Log] = []
        # Kafka's topic id (storage.topic_id), in every partition's partition.metadata.
        self.topic_id = topic_id


class LogManager:
    """Owns one data directory. `open()` before use, `close()` for a clean shutdown."""

    def __init__(
        self,
        data_dir: Path | str,
        default_config: LogConfig | None = None,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        io: FileIO | None = None,
        fd_budget: FdBudget | None = None,
        fd_reserve: int = FD_RESERVE,
        remote_storage_system_enable: bool = False,
    ) -> None:
        """`fd_budget`: None builds one at `open()` from RLIMIT_NOFILE (raised there),
        leaving `fd_reserve` descriptors to the rest of the process (storage.fdbudget).
        `remote_storage_system_enable`: `remote.log.storage.system.enable` (see below)."""
        self.remote_storage_system_enable = remote_storage_system_enable
        self.data_dir = Path(data_dir)
        self._defaults = default_config or LogConfig()
        self._clock_ms = clock_ms
        self._io = io or FileIO()
        self._lock = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        # Topic ids to names, replaced with `_topics` (Fetch v13+ names topics by id).
        self._by_id: dict[bytes, str] = {}
        # Topics whose metadata exists but that did not fit the fd budget at open: why.
        self._unloaded: dict[str, str] = {}
        self._fd_budget = fd_budget
        self._fd_reserve = fd_reserve
        self._dir = DataDir(self.data_dir, self._io)
        self._deletions = DeletionQueue()
        self.had_clean_shutdown = False
        self._open_duration_s = 0.0
        self._producer_ids: ProducerIds | None = None
        # KIP-890 part 1: the transaction coordinator may install a check the Kafka
        # Produce asks before a transactional batch is appended:
        # txn_verifier(transactional_id, producer_id, producer_epoch, topic, partition)
        # -> None (accept) or the name of a Kafka error (e.g. "INVALID_TXN_STATE").
        # None here: every transactional batch is accepted (the log's checks apply).
        self.txn_verifier: Callable[[str, int, int, str, int], str | None] | None = None

    # ---- lifecycle -------------------------------------------------------

    def open(self) -> None:
        """Take the directory lock, then load and (if needed) recover every partition."""
        self._dir.lock()
        self.had_clean_shutdown = self._dir.take_clean_shutdown_marker()
        self._dir.remove_temp_files()
        recovery_points, start_offsets = self._dir.read_checkpoints()
        raise_nofile_limit()
        if self._fd_budget is None:
            self._fd_budget = FdBudget(reserve=self._fd_reserve)
        size_caches(self._fd_budget)
        log.info("log_manager_opening", path=str(self.data_dir), clean=self.had_clean_shutdown)
        started = time.monotonic()
        for claimed, path in self._dir.metadata_files():
            try:
                meta = self._dir.read_metadata(path)
                overrides = _valid_stored_overrides(meta["topic"], meta["configs"], self._defaults)
                topic = _Topic(
                    meta["topic"],
                    overrides,
                    self._config_for(overrides),
                    self._stored_topic_id(meta["topic"], meta["partitions"]),
                )
            except TidelogError as exc:  # one topic's bad file never stops the start
                self._leave_unloaded(claimed, exc.message)
                continue
            self._load_topic(topic, meta["partitions"], recovery_points, start_offsets)
        self._dir.sweep_dirs(self._claims)
        self._open_duration_s = time.monotonic() - started
        log.info(
            "log_manager_opened",
            path=str(self.data_dir),
            clean=self.had_clean_shutdown,
            partitions=len(self.all_logs()),
            duration_s=round(self._open_duration_s, 6),
        )

    def _load_topic(
        self,
        topic: _Topic,
        partitions: int,
        recovery_points: Mapping[tuple[str, int], int],
        start_offsets: Mapping[tuple[str, int], int],
    ) -> None:
        """Open every partition of a topic, or none. No budget is asked: a loaded
        partition keeps no descriptor (storage.fdcache), so whatever creation accepted
        loads (issue 38, item 4). Only a process that runs out of descriptors even
        after the cache released its own leaves the topic unloaded, its files
        untouched, and the start goes on (issue 23, finding 1)."""
        try:
            for partition in range(partitions):
                topic.logs.append(
                    self._open_partition(topic, partition, recovery_points, start_offsets)
                )
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self._close_logs(topic.logs)
            self._leave_unloaded(topic.name, f"ran out of file descriptors: {exc}")
            return
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic.name

    def _stored_topic_id(self, name: str, partitions: int) -> bytes:
        """A loading topic's id from its partitions' partition.metadata, or a new one for
        a topic an older Tidelog made (each partition gets the file as it opens)."""
        dirs = (self._dir.partition_dir(name, p) for p in range(partitions))
        found = find_topic_id(self._io, dirs)
        return found if found is not None else new_topic_id()

    def _leave_unloaded(self, name: str, reason: str) -> None:
        self._unloaded[name] = reason
        log.error(
            "topic_not_loaded",
            topic=name,
            reason=reason,
            hint="raise the open-files limit (LimitNOFILE) or delete the topic",
        )

    def _claims(self, topic: str, partition: int) -> bool:
        """Whether a partition directory belongs to a topic (an unloaded topic keeps
        its metadata, so it keeps its partitions too)."""
        if topic in self._unloaded:
            return True
        loaded = self._topics.get(topic)
        return loaded is not None and partition < len(loaded.logs)

    def _budget(self) -> FdBudget:
        if self._fd_budget is None:
            self._fd_budget = FdBudget(reserve=self._fd_reserve)
        return self._fd_budget

    @staticmethod
    def _close_logs(logs: list[Log]) -> None:
        for current in logs:
            try:
                current.close()
            except (StorageError, OSError) as exc:
                log.warning("log_close_failed", topic=current.topic, error=str(exc))

    def _open_partition(
        self,
        topic: _Topic,
        partition: int,
        recovery_points: Mapping[tuple[str, int], int],
        start_offsets: Mapping[tuple[str, int], int],
    ) -> Log:
        key = (topic.name, partition)
        directory = self._dir.partition_dir(topic.name, partition)
        opened = open_log(
            directory,
            topic.name,
            partition,
            topic.config,
            io=self._io,
            clock_ms=self._clock_ms,
            deletion_queue=self._deletions,
            recovery_point=recovery_points.get(key),
            log_start_offset=start_offsets.get(key),
            clean=self.had_clean_shutdown,
            fd_budget=self._fd_budget,
        )
        try:
            ensure_partition_metadata(self._io, directory, topic.topic_id)
        except OSError:
            opened.close()
            raise
        return opened

    def close(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker."""
        with self._lock:
            failed = False
            for current in self.all_logs():
                # A poisoned log could not fsync: the next start must recover it.
                failed |= current.poisoned
                try:
                    current.close()
                except (StorageError, OSError) as exc:
                    log.error("log_close_failed", topic=current.topic, error=str(exc))
                    failed = True
            self.write_checkpoints()
            if not failed:
                self._dir.write_clean_shutdown_marker()
            self._topics = {}
            self._by_id = {}
            self._dir.unlock()
            log.info("log_manager_closed", path=str(self.data_dir), clean=not failed)

    @property
    def producer_ids(self) -> ProducerIds:
        """The data directory's producer id source (init_producer_id), read on first use:
        an unreadable `producer-id-block` fails that call (STORAGE_ERROR), not the start."""
        with self._lock:
            if self._producer_ids is None:
                self._producer_ids = ProducerIds(ProducerIdAllocator(self._io, self.data_dir))
            return self._producer_ids

    # ---- topics ----------------------------------------------------------

    def _config_for(self, overrides: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_props(overrides, self._defaults)

    def validate_topic_config(self, overrides: Mapping[str, object]) -> LogConfig:
        """A create's or alter's config, or InvalidConfig (remote.storage.enable=true
        needs remote.log.storage.system.enable)."""
        config = self._config_for({key: _as_text(value) for key, value in overrides.items()})
        if config.remote_storage_enable and not self.remote_storage_system_enable:
            raise InvalidConfig(REMOTE_DISABLED_MESSAGE)
        return config

    def create_topic(
        self, name: str, partitions: int = 1, configs: Mapping[str, object] | None = None
    ) -> None:
        problem = validate_topic_name(name)
        if problem is not None:
            raise InvalidTopic(problem)
        if isinstance(partitions, bool) or not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitions(
                f"partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}], not {partitions}"
            )
        overrides = {key: _as_text(value) for key, value in (configs or {}).items()}
        config = self.validate_topic_config(overrides)
        with self._lock:
            if name in self._topics or name in self._unloaded:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            budget = self._budget()
            # Partitions are opened one at a time and keep nothing open once created
            # (storage.fdcache): what must fit is one segment's opening.
            if not budget.allows(FDS_PER_ACTIVE_SEGMENT):
                raise InvalidPartitions(
                    f"topic {name!r} cannot be created: its segments need "
                    f"{FDS_PER_ACTIVE_SEGMENT} file descriptors at once; {budget.describe()}: "
                    "close connections or raise the open-files limit"
                )
            self._create_topic_files(_Topic(name, overrides, config, new_topic_id()), partitions)
        log.info("topic_created", topic=name, partitions=partitions, configs=overrides)

    def _create_topic_files(self, topic: _Topic, partitions: int) -> None:
        """All or nothing: partition directories first, the metadata last (a crash
        before it leaves directories the next start moves aside as strays); a failure
        closes and removes every partition opened so far."""
        name = topic.name
        try:
            for partition in range(partitions):
                topic.logs.append(self._open_partition(topic, partition, {}, {}))
            self._dir.sync()
            self._dir.write_metadata(name, partitions, topic.overrides)
        except OSError as exc:
            self._close_logs(topic.logs)
            self._dir.remove_partition_dirs(name, range(partitions))
            log.error("topic_create_failed", topic=name, partitions=partitions, error=str(exc))
            raise StorageError(f"creating topic {name!r} failed (rolled back): {exc}") from exc
        self._topics = {**self._topics, name: topic}
        self._by_id = {**self._by_id, topic.topic_id: name}

    def delete_topic(self, name: str) -> None:
        with self._lock:
            try:
                if name in self._unloaded:
                    self._dir.delete_unloaded_topic(name)
                    del self._unloaded[name]
                    log.info("topic_deleted", topic=name, loaded=False)
                    return
                topic = self._topic(name)
                self._topics = {k: v for k, v in self._topics.items() if k != name}
                self._by_id = {k: v for k, v in self._by_id.items() if v != name}
                for current in topic.logs:
                    current.mark_deleted()
                self._dir.delete_topic(name, len(topic.logs))
            except OSError as exc:
                raise StorageError(f"deleting topic {name!r} failed: {exc}") from exc
        log.info("topic_deleted", topic=name)

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        return topic

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def topic_id(self, name: str) -> bytes:
        """Topic `name`'s id (16 bytes, Kafka's topic id); UnknownTopicOrPartition if none."""
        return self._topic(name).topic_id

    def topic_by_id(self, topic_id: bytes) -> str | None:
        """The loaded topic with this id, or None."""
        return self._by_id.get(topic_id)

    def partition_count(self, name: str) -> int:
        return len(self._topic(name).logs)

    def get_log(self, topic: str, partition: int) -> Log:
        logs = self._topic(topic).logs
        if not 0 <= partition < len(logs):
            raise UnknownTopicOrPartition(f"unknown partition {topic}-{partition}")
        return logs[partition]

    def all_logs(self) -> list[Log]:
        return [current for topic in self._topics.values() for current in topic.logs]

    # ---- configs ---------------------------------------------------------

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self._topic(name).overrides)

    def topic_config(self, name: str) -> LogConfig:
        return self._topic(name).config

    def default_config(self) -> LogConfig:
        return self._defaults

    def alter_topic_config(
        self,
        name: str,
        set: Mapping[str, object] | None = None,
        delete: Iterable[str] = (),
    ) -> LogConfig:
        """Change overrides; validated as a whole, persisted, then applied to every partition."""
        with self._lock:
            topic = self._topic(name)
            overrides = dict(topic.overrides)
            for key in delete:
                overrides.pop(key, None)
            overrides.update({key: _as_text(value) for key, value in (set or {}).items()})
            config = self.validate_topic_config(overrides)
            if topic.config.remote_storage_enable and not config.remote_storage_enable:
                raise InvalidConfig(REMOTE_TURN_OFF_MESSAGE)
            try:
                self._dir.write_metadata(name, len(topic.logs), overrides)
            except OSError as exc:
                raise StorageError(f"saving configs of {name!r} failed: {exc}") from exc
            old = topic.overrides
            topic.overrides, topic.config = overrides, config
            for current in topic.logs:
                current.config = config
        log.info("config_changed", topic=name, old=old, new=overrides)
        return config

    def set_default_config(self, config: LogConfig) -> None:
        """New broker-level defaults: every topic's effective config is recomputed."""
        with self._lock:
            self._defaults = config
            for topic in self._topics.values():
                topic.config = self._config_for(topic.overrides)
                for current in topic.logs:
                    current.config = topic.config

    # ---- checkpoints and deletions ----------------------------------------

    def write_checkpoints(self) -> None:
        """Write both checkpoints atomically; log start entries only where it is not the
        first local base (delete-records; a tiered log's older segments in the store)."""
        recovery: dict[tuple[str, int], int] = {}
        starts: dict[tuple[str, int], int] = {}
        for topic in list(self._topics.values()):
            for partition, current in enumerate(topic.logs):
                recovery[(topic.name, partition)] = current.recovery_point
                info = current.log_start_offset
                if info != current.segments_info()[0].base_offset:
                    starts[(topic.name, partition)] = info
        self._dir.write_checkpoints(recovery, starts)

    def statistics(self) -> StorageStatistics:
        counts = (len(self._unloaded), len(self._topics), len(self._deletions.pending()))
        return _statistics(self.all_logs(), self.had_clean_shutdown, self._open_duration_s, counts)

    def pending_deletions(self) -> list[tuple[Path, int]]:
        """(path, due_ms) of every file renamed `.deleted` and not yet unlinked."""
        return self._deletions.pending()

    def delete_due_files(self, now_ms: int | None = None) -> int:
        """Unlink the `.deleted` files whose delay has passed; the scheduler calls this."""
        due = self._deletions.take_due(self._clock_ms() if now_ms is None else now_ms)
        return delete_marked_files(due)

    # ---- growing a topic ---------------------------------------------------

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> int:
        """Kafka's CreatePartitions; the count before (`storage.partition_growth`)."""
        with self._lock:
            topic = self._topic(name)
            return grow_topic(
                topic,
                count,
                data_dir=self._dir,
                budget=self._budget(),
                open_partition=lambda p: self._open_partition(topic, p, {}, {}),
                close_logs=self._close_logs,
                validate_only=validate_only,
            )


def _statistics(
    logs: list[Log], clean: bool, open_duration_s: float, counts: tuple[int, int, int]
) -> StorageStatistics:
    """`LogManager.statistics` from its logs; `counts`: unloaded topics, topics, files
    pending deletion."""
    unloaded, topics, pending = counts
    return StorageStatistics(
        had_clean_shutdown=clean,
        open_duration_s=open_duration_s,
        recovery_truncated_bytes=sum(current.recovery_truncated_bytes for current in logs),
        fenced_segments=sum(current.fenced_segments for current in logs),
        quarantined_segments=sum(current.quarantined_segments for current in logs),
        unloaded_topics=unloaded,
        topics=topics,
        partitions=len(logs),
        poisoned_partitions=sum(1 for current in logs if current.poisoned),
        pending_deletions=pending,
    )


def _valid_stored_overrides(
    topic: str, stored: Mapping[str, str], defaults: LogConfig
) -> dict[str, str]:
    """Stored overrides, validated again. An older broker took integers above int64
    (issue 23 finding 3); where int64's top means "no limit" (`retention.ms`,
    `retention.bytes`, ...), such a value is clamped to it and logged, so the topic
    loads with the meaning its owner gave. Any other invalid value raises
    InvalidConfig: the topic stays unloaded and its data untouched, rather than
    falling back to a default that could delete what the override kept."""
    overrides = dict(stored)
    for key, value in stored.items():
        try:
            LogConfig.from_props({key: value}, defaults)
        except InvalidConfig as exc:
            clamped = _clamped_to_int64(key, value)
            if clamped is None:
                raise
            log.warning("topic_config_clamped", topic=topic, key=key, value=value,
                        clamped=clamped, error=exc.message)  # fmt: skip
            overrides[key] = clamped
    return overrides


def _as_text(value: object) -> str:
    """Config values are stored in Kafka's text form (`protocol.settings.config_text`)."""
    if not isinstance(value, str | int | float | list | tuple | set | frozenset):
        raise InvalidConfig(f"config value {value!r} is not a string or number")
    return config_text(value)


def _clamped_to_int64(key: str, value: str) -> str | None:
    """int64's top for an integer above it, where the setting's own top is int64's."""
    setting = TOPIC_CONFIG_DEFS.get(key)
    if setting is None or setting.type is not int or setting.bounds[1] != INT64_MAX:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return str(INT64_MAX) if number > INT64_MAX else None
