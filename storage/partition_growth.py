"""Growing a topic's partition count (Kafka's CreatePartitions), apart from
`storage.manager` so the manager class stays small; it works on the manager's own
lock, topic table, data directory and descriptor budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from protocol.errors import InvalidPartitions, StorageError
from storage.data_dir import MAX_PARTITIONS_PER_TOPIC, DataDir
from storage.fdbudget import FDS_PER_ACTIVE_SEGMENT, FdBudget
from storage.log import Log

__all__ = ["GrowingTopic", "grow_topic"]

log = structlog.get_logger("tidelog.storage")


class GrowingTopic(Protocol):
    """What growth needs of the manager's topic record."""

    name: str
    overrides: dict[str, str]
    logs: list[Log]


def grow_topic(
    topic: GrowingTopic,
    count: int,
    *,
    data_dir: DataDir,
    budget: FdBudget,
    open_partition: Callable[[int], Log],
    close_logs: Callable[[list[Log]], None],
    validate_only: bool = False,
) -> int:
    """Grow `topic` to `count` partitions (Kafka's CreatePartitions), under the
    manager's lock; the partitions it had before, which this returns.

    Only an increase: InvalidPartitions otherwise, or beyond the per-topic limit
    or the descriptor budget. The new partitions' directories come first, the
    metadata with the new count last (a crash before it leaves directories the
    next start moves aside as strays); a failure removes what it made. The new
    logs are published in one swap, so readers see the old or the new list."""
    name, before = topic.name, len(topic.logs)
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
            added.append(open_partition(partition))
        data_dir.sync()
        data_dir.write_metadata(name, count, topic.overrides)
    except OSError as exc:
        close_logs(added)
        data_dir.remove_partition_dirs(name, range(before, count))
        raise StorageError(f"adding partitions to {name!r} failed: {exc}") from exc
    topic.logs = [*topic.logs, *added]
    log.info("partitions_added", topic=name, before=before, partitions=count)
    return before
