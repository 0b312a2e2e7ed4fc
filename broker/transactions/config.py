"""The transaction coordinator's broker settings (Kafka's names and defaults)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TxnConfig"]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    # `transaction.max.timeout.ms`: the longest `transaction.timeout.ms` a producer may ask.
    max_timeout_ms: int = 900_000
    # `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often open
    # transactions are checked against their timeout.
    abort_timed_out_interval_ms: int = 10_000
    # `transactional.id.expiration.ms`: an id with no transaction open and no request
    # for this long is forgotten (a tombstone in `__transaction_state`).
    id_expiration_ms: int = 604_800_000
    # `transaction.remove.expired.transaction.cleanup.interval.ms`.
    remove_expired_interval_ms: int = 3_600_000
    # `transaction.state.log.segment.bytes`.
    log_segment_bytes: int = 100 * 1024 * 1024
