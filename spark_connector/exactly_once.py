"""Producer identities for the exactly-once sink: one per (write, batch, Spark partition).

A write task stamps its batches with a producer id derived from (write id, batch id,
partition id), epoch 0 and per-partition sequences from 0. A retried task attempt or a
replayed micro-batch derives the same id and re-sends the same batches, so the broker
answers them as duplicates (docs/idempotence.md "Exactly-once Spark sink"). The task
attempt number is deliberately not part of the identity.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

# Equal to storage.producer_ids.RESERVED_PRODUCER_IDS_START (spark_connector may not import
# storage; a unit test checks the two agree): the broker never allocates ids from here on,
# so a derived id cannot collide with an allocated one.
DERIVED_PRODUCER_IDS_START: Final = 2**62
# Producer ids are int64 on the wire: derived ids fill [2**62, 2**63).
DERIVED_PRODUCER_IDS_END: Final = 2**63
# Sequences are int32 and wrap to 0 after the largest one, as the broker's do.
SEQUENCE_MODULUS: Final = 2**31
# Derived producers never bump their epoch: a retry must present the same epoch.
DERIVED_PRODUCER_EPOCH: Final = 0
# Spark's local properties (set by StreamExecution / MicroBatchExecution on the driver and
# shipped to every task): the query id survives a restart from the checkpoint.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"
# A batch write (no micro-batches) is batch 0 of its write id.
BATCH_WRITE_BATCH_ID: Final = 0

_KEY = struct.Struct(">qq")


def derive_producer_id(write_id: str, batch_id: int, partition_id: int) -> int:
    """SHA-256 of the three, its first 8 bytes folded into [2**62, 2**63)."""
    digest = hashlib.sha256(write_id.encode() + b"\0" + _KEY.pack(batch_id, partition_id)).digest()
    span = DERIVED_PRODUCER_IDS_END - DERIVED_PRODUCER_IDS_START
    return DERIVED_PRODUCER_IDS_START + int.from_bytes(digest[:8], "big") % span


@dataclass(frozen=True)
class TaskIdentity:
    """The derived producer a write task stamps on its batches."""

    producer_id: int


def task_identity(write_id: str | None) -> TaskIdentity:
    """The running task's identity, from Spark's TaskContext (executor side only).

    Streaming writes use the query id and batch id Spark ships with every task, unless
    the user fixed `writeId`; batch writes use `writeId` (the driver fills in a fresh one
    per save() when the user gave none) and batch 0.
    """
    from pyspark import TaskContext  # executor-only import: the driver never calls this

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once sink derives its producer id inside a Spark task")
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_text = context.getLocalProperty(BATCH_ID_PROPERTY)
    if query_id is not None and batch_text is not None:
        base, batch_id = write_id or query_id, int(batch_text)
    elif write_id is not None:
        base, batch_id = write_id, BATCH_WRITE_BATCH_ID
    else:
        raise RuntimeError(
            "exactlyOnce: no streaming query id in the task and no writeId; set the writeId option"
        )
    return TaskIdentity(derive_producer_id(base, batch_id, context.partitionId()))
