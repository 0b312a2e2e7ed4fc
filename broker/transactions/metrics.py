"""The transaction coordinator's series, read at scrape time (docs/observability.md).

Counters and the open-transactions gauge come from the service's totals; the LSO
lag (high watermark minus last stable offset) is read from each partition's
in-memory producer state, and only partitions with an open transaction get a
series (a hanging transaction shows as a lag that keeps growing).
"""

from __future__ import annotations

from collections.abc import Iterator

from broker.metrics import Sample
from broker.transactions.service import TransactionService
from protocol.errors import TidelogError
from storage.manager import LogManager

__all__ = ["transaction_samples"]


def transaction_samples(service: TransactionService, manager: LogManager) -> Iterator[Sample]:
    yield Sample(
        "tidelog_transactions_open", "gauge",
        "Transactions begun and not yet completed (Ongoing or Prepare*).",
        service.open_transactions(),
    )  # fmt: skip
    yield Sample(
        "tidelog_transactions_committed", "counter",
        "Transactions completed with COMMIT since the broker started.", service.committed,
    )  # fmt: skip
    yield Sample(
        "tidelog_transactions_aborted", "counter",
        "Transactions completed with ABORT since the broker started (by the client, "
        "a new instance of the producer, or the timeout).", service.aborted,
    )  # fmt: skip
    yield Sample(
        "tidelog_transactions_timed_out", "counter",
        "Transactions aborted by transaction.timeout.ms since the broker started.",
        service.timed_out,
    )  # fmt: skip
    yield Sample(
        "tidelog_transaction_marker_failures", "counter",
        "Marker rounds that failed and were retried (a storage error).", service.failed_markers,
    )  # fmt: skip
    yield Sample(
        "tidelog_transactional_ids", "gauge",
        "Transactional ids the coordinator knows.", len(service.coordinator.txns),
    )  # fmt: skip
    for topic in sorted(manager.topics()):
        try:
            count = manager.partition_count(topic)
            for partition in range(count):
                plog = manager.get_log(topic, partition)
                lag = plog.high_watermark - plog.last_stable_offset
                if lag > 0:
                    yield Sample(
                        "tidelog_partition_lso_lag", "gauge",
                        "Records between the last stable offset and the high watermark "
                        "(what read_committed consumers cannot read yet).",
                        lag, (("topic", topic), ("partition", str(partition))),
                    )  # fmt: skip
        except TidelogError:
            continue  # deleted while we looked
