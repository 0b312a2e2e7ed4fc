"""What the handlers of every API family share: per-partition errors, log lookup,
sharing the event loop over long partition lists."""

from __future__ import annotations

import trio

from broker import remote_read
from broker.context import BrokerContext
from broker.logging import get_logger
from protocol.errors import StorageError, TidelogError, UnknownServerError, UnknownTopicOrPartition
from protocol.schemas import check_topic_name
from storage.log import Log

log = get_logger(component="handlers")

# Per-partition loops yield to other tasks this often, so a request naming thousands
# of partitions shares the loop instead of holding it for all of them.
PARTITIONS_PER_CHECKPOINT = 64


def partition_error(exc: BaseException) -> tuple[str, str | None]:
    """(code, message) for a per-partition failure; unexpected ones are logged."""
    if isinstance(exc, TidelogError):
        return exc.code, exc.message or None
    if isinstance(exc, OSError):
        log.error("storage_error", error=str(exc), errno=exc.errno)
        return StorageError.code, str(exc)
    log.error("partition_request_failed", exc_info=exc)
    return UnknownServerError.code, f"{type(exc).__name__}: {exc}"


def get_log(ctx: BrokerContext, topic: str, partition: int) -> Log:
    try:
        plog = ctx.manager.get_log(topic, partition)
    except TidelogError:
        raise
    except (KeyError, IndexError) as exc:
        raise UnknownTopicOrPartition(f"unknown topic or partition {topic}-{partition}") from exc
    if ctx.remote_reader is not None and plog.remote is None:
        remote_read.ensure_attached(ctx, plog)  # tiered storage: reads below the local start
    return plog


async def share_loop(done: int) -> int:
    """Count one partition of a request; every PARTITIONS_PER_CHECKPOINT, let other
    tasks run (a per-partition loop never holds the event loop for a whole request)."""
    done += 1
    if done % PARTITIONS_PER_CHECKPOINT == 0:
        await trio.lowlevel.checkpoint()
    return done


def high_watermark(plog: Log) -> int:
    """High watermark; on a single broker it is the log end offset (docs/design.md)."""
    return plog.high_watermark


def require_topic(ctx: BrokerContext, topic: str) -> None:
    """INVALID_TOPIC_EXCEPTION for an illegal name, UNKNOWN_TOPIC_OR_PARTITION if absent."""
    check_topic_name(topic)
    if topic not in ctx.manager.topics():
        raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
