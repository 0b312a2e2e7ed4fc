"""Growing a topic's partition count (Kafka's CreatePartitions), apart from
`storage.manager` so the manager class stays small; it works on the manager's own
lock, topic table, data directory and descriptor budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from protocol.errors import InvalidPartitions, StorageError
from storage.data_dir import MAX_PARTITIONS_PER_TOPIC
from storage.fdbudget import FDS_PER_ACTIVE_SEGMENT

if TYPE_CHECKING:
    from storage.log import Log
    from storage.manager import LogManager

__all__ = ["add_partitions"]

log = structlog.get_logger("tidelog.storage")


def add_partitions(
    manager: LogManager, name: str, count: int, *, validate_only: bool = False
) -> int:
    """Grow topic `name` to `count` partitions (Kafka's CreatePartitions); the
    partitions it had before, which this returns.

    Only an increase: InvalidPartitions otherwise, or beyond the per-topic limit
    or the descriptor budget. The new partitions' directories come first, the
    metadata with the new count last (a crash before it leaves directories the
    next start moves aside as strays); a failure removes what it made. The new
    logs are published in one swap, so readers see the old or the new list."""
    with manager._lock:
        topic = manager._topic(name)
        before = len(topic.logs)
        if count == before:
            raise InvalidPartitions(f"Topic already has {before} partition(s).")
        if count < before:
            raise InvalidPartitions(
                f"The topic {name} currently has {before} partition(s); "
                f"{count} would not be an increase."
            )
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitions(
                f"partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}], not {count}"
            )
        budget = manager._budget()
        needed = (count - before) * FDS_PER_ACTIVE_SEGMENT
        if not budget.allows(needed):
            raise InvalidPartitions(
                f"{count - before} more partitions of {name!r} need ~{needed} file "
                f"descriptors; {budget.describe()}"
            )
        if validate_only:
            return before
        added: list[Log] = []
        try:
            for partition in range(before, count):
                added.append(manager._open_partition(topic, partition, {}, {}))
            manager._dir.sync()
            manager._dir.write_metadata(name, count, topic.overrides)
        except OSError as exc:
            manager._close_logs(added)
            manager._dir.remove_partition_dirs(name, range(before, count))
            raise StorageError(f"adding partitions to {name!r} failed: {exc}") from exc
        topic.logs = [*topic.logs, *added]
    log.info("partitions_added", topic=name, before=before, partitions=count)
    return before
