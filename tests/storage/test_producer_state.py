"""Producer state: each outcome of the append check, replay, expiry and truncation."""

from __future__ import annotations

import pytest

from protocol.batch import encode_batch, iter_headers, set_base_offset
from protocol.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    OutOfOrderSequenceNumber,
    UnknownProducerId,
)
from storage.producer_state import (
    BATCHES_RETAINED,
    NOT_IDEMPOTENT,
    Accepted,
    BatchMetadata,
    Duplicate,
    ProducerEntry,
    ProducerState,
    last_sequence,
)

SEQ_MAX = 2**31 - 1
PID = 42


def append(
    state: ProducerState, pid: int, epoch: int, seq: int, count: int = 1, ts: int = 1000
) -> Accepted | Duplicate:
    """Check one batch at the log end and commit it: a successful write."""
    pending = state.begin_append()
    outcome = pending.check(pid, epoch, seq, count - 1, ts, state.map_end_offset)
    if isinstance(outcome, Accepted):
        state.commit(pending, state.map_end_offset + count)
    assert not isinstance(outcome, type(NOT_IDEMPOTENT))
    return outcome


def test_non_idempotent_batch_needs_nothing() -> None:
    state = ProducerState()
    pending = state.begin_append()
    assert pending.check(-1, -1, -1, 9, 1000, 0) is NOT_IDEMPOTENT
    state.commit(pending, 10)
    assert len(state) == 0
    assert state.map_end_offset == 10


def test_first_batch_of_a_producer_is_accepted_and_remembered() -> None:
    state = ProducerState()
    outcome = append(state, PID, 0, 0, count=3, ts=1234)
    assert isinstance(outcome, Accepted)
    entry = state.entry(PID)
    assert entry is not None
    assert entry.epoch == 0
    assert entry.batches == (BatchMetadata(0, 2, 0, 2, 1234),)
    assert entry.last_timestamp == 1234


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_offsets() -> None:
    state = ProducerState()
    append(state, 7, 0, 0, count=2)  # offsets 0-1, sequences 0-1
    for i in range(BATCHES_RETAINED):
        append(state, PID, 0, i * 10, count=10, ts=2000 + i)
    offsets_before = state.map_end_offset
    for i in range(BATCHES_RETAINED):
        pending = state.begin_append()
        outcome = pending.check(PID, 0, i * 10, 9, 0, state.map_end_offset)
        assert outcome == Duplicate(
            PID, BatchMetadata(i * 10, i * 10 + 9, 2 + i * 10, 11 + i * 10, 2000 + i)
        )
    assert state.map_end_offset == offsets_before


def test_a_batch_older_than_the_last_five_is_out_of_order_not_a_duplicate() -> None:
    state = ProducerState()
    for i in range(BATCHES_RETAINED + 1):
        append(state, PID, 0, i)
    with pytest.raises(OutOfOrderSequenceNumber):
        state.begin_append().check(PID, 0, 0, 0, 0, state.map_end_offset)


def test_a_retry_with_a_different_range_is_out_of_order() -> None:
    state = ProducerState()
    append(state, PID, 0, 0, count=5)
    with pytest.raises(OutOfOrderSequenceNumber, match="expected 5"):
        state.begin_append().check(PID, 0, 0, 2, 0, 5)


def test_gap_in_sequence_is_out_of_order_and_leaves_state_unchanged() -> None:
    state = ProducerState()
    append(state, PID, 0, 0, count=2)
    before = state.entries()
    with pytest.raises(OutOfOrderSequenceNumber, match="sequence 3, expected 2"):
        state.begin_append().check(PID, 0, 3, 0, 0, 2)
    assert state.entries() == before


def test_older_epoch_is_invalid_producer_epoch() -> None:
    state = ProducerState()
    append(state, PID, 3, 0)
    with pytest.raises(InvalidProducerEpoch, match="epoch 2, older than its last epoch 3"):
        state.begin_append().check(PID, 2, 1, 0, 0, 1)


def test_newer_epoch_must_start_at_zero_and_forgets_older_batches() -> None:
    state = ProducerState()
    append(state, PID, 0, 0)
    with pytest.raises(OutOfOrderSequenceNumber, match="not 0"):
        state.begin_append().check(PID, 1, 1, 0, 0, 1)
    append(state, PID, 1, 0)
    entry = state.entry(PID)
    assert entry is not None
    assert entry.epoch == 1
    assert [b.first_offset for b in entry.batches] == [1]
    # The old epoch's batch is no longer a duplicate: its epoch is fenced.
    with pytest.raises(InvalidProducerEpoch):
        state.begin_append().check(PID, 0, 0, 0, 0, 2)


def test_unknown_producer_must_start_at_sequence_zero() -> None:
    state = ProducerState()
    with pytest.raises(UnknownProducerId, match="sent sequence 1000, not 0"):
        state.begin_append().check(PID, 5, 1_000, 0, 0, 0)
    assert isinstance(append(state, PID, 5, 0), Accepted)  # any epoch, from sequence 0
    with pytest.raises(OutOfOrderSequenceNumber):
        state.begin_append().check(PID, 5, 1_005, 0, 0, 1)


def test_forgotten_producer_is_unknown_again() -> None:
    state = ProducerState(expiration_ms=100)
    append(state, PID, 0, 0, ts=1_000)
    state.remove_expired(1_100)
    with pytest.raises(UnknownProducerId):
        state.begin_append().check(PID, 0, 1, 0, 0, 1)


@pytest.mark.parametrize(
    ("epoch", "seq"), [(-1, 0), (0, -1)], ids=["negative-epoch", "negative-sequence"]
)
def test_producer_id_without_epoch_or_sequence_is_invalid_record(epoch: int, seq: int) -> None:
    with pytest.raises(InvalidRecord):
        ProducerState().begin_append().check(PID, epoch, seq, 0, 0, 0)


def near_the_wrap(last_seq: int) -> ProducerState:
    """A state whose producer's last batch ended at `last_seq` (loaded, as at a restart)."""
    state = ProducerState()
    state.load({PID: ProducerEntry(0, (BatchMetadata(0, last_seq, 0, 0, 1000),), 1000)}, 1)
    return state


def test_sequences_wrap_at_int32() -> None:
    assert last_sequence(SEQ_MAX - 1, 3) == 1
    state = near_the_wrap(SEQ_MAX - 2)
    append(state, PID, 0, SEQ_MAX - 1, count=2)  # sequences MAX-1, MAX
    append(state, PID, 0, 0, count=3)  # wraps to 0
    outcome = append(state, PID, 0, SEQ_MAX - 1, count=2)
    assert isinstance(outcome, Duplicate)
    assert outcome.batch.first_offset == 1
    # A batch that itself wraps: sequences MAX..1 (3 records).
    state2 = near_the_wrap(SEQ_MAX - 1)
    append(state2, PID, 0, SEQ_MAX, count=3)
    entry = state2.entry(PID)
    assert entry is not None and entry.last_sequence == 1
    assert isinstance(append(state2, PID, 0, 2), Accepted)


def test_batches_of_one_request_are_checked_in_order_against_the_pending_state() -> None:
    state = ProducerState()
    append(state, PID, 0, 0)
    pending = state.begin_append()
    assert isinstance(pending.check(PID, 0, 1, 1, 0, 1), Accepted)  # seqs 1-2
    assert isinstance(pending.check(PID, 0, 3, 0, 0, 3), Accepted)  # seq 3 follows the pending
    with pytest.raises(OutOfOrderSequenceNumber, match="expected 4"):
        pending.check(PID, 0, 1, 1, 0, 4)
    state.commit(pending, 4)
    entry = state.entry(PID)
    assert entry is not None
    assert [b.first_sequence for b in entry.batches] == [0, 1, 3]


def test_unknown_producer_second_batch_in_one_request_must_follow_the_first() -> None:
    pending = ProducerState().begin_append()
    pending.check(PID, 0, 0, 0, 0, 0)
    with pytest.raises(OutOfOrderSequenceNumber):
        pending.check(PID, 0, 60, 0, 0, 1)


def test_failed_write_is_not_committed() -> None:
    state = ProducerState()
    append(state, PID, 0, 0)
    pending = state.begin_append()
    pending.check(PID, 0, 1, 0, 0, 1)
    # The write failed: the caller drops `pending`. The retry is not a duplicate.
    assert isinstance(state.begin_append().check(PID, 0, 1, 0, 0, 1), Accepted)


def test_only_the_last_batches_are_retained() -> None:
    state = ProducerState()
    for i in range(BATCHES_RETAINED + 7):
        append(state, PID, 0, i)
    entry = state.entry(PID)
    assert entry is not None
    assert [b.first_sequence for b in entry.batches] == list(range(7, BATCHES_RETAINED + 7))


def test_expiration_by_last_batch_timestamp() -> None:
    state = ProducerState(expiration_ms=1000)
    append(state, 1, 0, 0, ts=5000)
    append(state, 2, 0, 0, ts=5500)
    assert state.remove_expired(5999) == 0
    assert state.remove_expired(6000) == 1
    assert state.entry(1) is None and state.entry(2) is not None


def test_truncate_head_drops_producers_and_batches_below_the_log_start() -> None:
    state = ProducerState()
    append(state, 1, 0, 0, count=5)  # offsets 0-4
    append(state, 2, 0, 0, count=5)  # offsets 5-9
    assert state.truncate_head(5) == 1
    assert state.entry(1) is None and state.entry(2) is not None
    assert state.truncate_head(9) == 0
    entry = state.entry(2)
    assert entry is not None
    assert entry.batches == (BatchMetadata(0, 4, 5, 9, 1000),)
    append(state, 2, 0, 5, count=2)  # offsets 10-11
    assert state.truncate_head(10) == 0
    entry = state.entry(2)
    assert entry is not None
    assert [b.first_offset for b in entry.batches] == [10]
    state.truncate_fully_and_start_at(20)
    assert len(state) == 0 and state.map_end_offset == 20


def test_replay_of_logged_headers_rebuilds_the_same_state() -> None:
    live = ProducerState()
    log = bytearray()
    for pid, epoch, seq, n in [
        (1, 0, 0, 2),
        (-1, -1, -1, 3),
        (1, 0, 2, 1),
        (2, 4, 0, 2),
        (1, 1, 0, 1),
    ]:
        batch = bytearray(
            encode_batch(
                [(b"k", b"v", None, 1000 + seq)] * n,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        )
        pending = live.begin_append()
        pending.check(pid, epoch, seq, n - 1, 1000 + seq, live.map_end_offset)
        set_base_offset(batch, 0, live.map_end_offset)
        live.commit(pending, live.map_end_offset + n)
        log += batch
    rebuilt = ProducerState()
    applied = rebuilt.replay(header for _, header in iter_headers(bytes(log)))
    assert applied == 4
    assert rebuilt.entries() == live.entries()
    assert rebuilt.map_end_offset == live.map_end_offset == 9


def test_expiration_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"producer\.id\.expiration\.ms"):
        ProducerState(expiration_ms=0)
