"""When the cleaner may drop a transaction marker (Kafka's `CleanedTransactionMetadata`).

A COMMIT or ABORT control batch is kept while any batch of its transaction is still in
the log, so a read_committed reader always finds the marker that settles the data it
reads. Batches come to the cleaner in offset order from the log start, and a
transaction's data precede its marker: a marker is *discardable* when the pass that
reaches it traversed no batch of its transaction since that producer's previous marker
(the data were removed by an earlier pass: compacted away, or aborted data dropped).

A discardable marker is not dropped at once. As for tombstones (KIP-534), the first pass
that finds it discardable rewrites it with a delete horizon (attribute bit 6,
`base_timestamp` = now + `delete.retention.ms`); a pass at or after the horizon drops it.
A consumer that was mid-way through the log before the horizon therefore still reads the
marker of any transaction whose data it has already seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.batch import BatchHeader

__all__ = ["MarkerTracker"]


@dataclass(slots=True)
class MarkerTracker:
    """Per cleaning pass: the producers whose current transaction had a batch traversed."""

    now_ms: int
    _traversed: set[int] = field(default_factory=set)

    def saw_transactional_batch(self, producer_id: int) -> None:
        """A data batch of `producer_id`'s open transaction was read (kept or not)."""
        self._traversed.add(producer_id)

    def on_marker(self, header: BatchHeader) -> str:
        """'keep', 'set_horizon' or 'drop' for the marker `header` describes."""
        had_data = header.producer_id in self._traversed
        self._traversed.discard(header.producer_id)
        if had_data:
            return "keep"
        if not header.has_delete_horizon:
            return "set_horizon"
        return "drop" if self.now_ms >= header.base_timestamp else "keep"
