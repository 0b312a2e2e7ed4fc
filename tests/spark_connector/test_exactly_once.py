"""Derived producer ids of the exactly-once sink: deterministic, reserved, distinct."""

from __future__ import annotations

import itertools

import pytest

from protocol.errors import OutOfOrderSequenceNumber, UnknownProducerId
from spark_connector.exactly_once import (
    DERIVED_PRODUCER_IDS_END,
    DERIVED_PRODUCER_IDS_START,
    derive_producer_id,
)
from spark_connector.options import OptionError, parse_sink_options
from storage.producer_ids import PRODUCER_ID_MAX, RESERVED_PRODUCER_IDS_START
from storage.producer_state import Accepted, Duplicate, ProducerState


def test_the_derived_range_is_the_range_the_broker_never_allocates() -> None:
    assert DERIVED_PRODUCER_IDS_START == RESERVED_PRODUCER_IDS_START
    assert DERIVED_PRODUCER_IDS_END - 1 == PRODUCER_ID_MAX


def test_derivation_is_deterministic() -> None:
    query = "3f1c2a9e-0d1b-4c55-9a53-0f6f0d0f4b7e"
    assert derive_producer_id(query, 7, 3) == derive_producer_id(query, 7, 3)
    # A known value, so a change of the derivation (which would break replays of
    # micro-batches written before an upgrade) is noticed.
    # (SHA-256 of b"q\0" + two big-endian int64 zeros, first 8 bytes mod 2**62, + 2**62.)
    assert derive_producer_id("q", 0, 0) == 6069994148373570843


def test_ids_are_reserved_and_distinct_for_distinct_inputs() -> None:
    inputs = list(itertools.product(["q1", "q2", "q10", "q"], range(30), range(30)))
    ids = {derive_producer_id(w, b, p) for w, b, p in inputs}
    assert len(ids) == len(inputs)
    assert all(RESERVED_PRODUCER_IDS_START <= i < 2**63 for i in ids)
    # Fields cannot bleed into each other: ("q1", 0) and ("q", 10) differ.
    assert derive_producer_id("q1", 0, 0) != derive_producer_id("q", 10, 0)


def test_sink_options_exactly_once_and_write_id() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    off = parse_sink_options(base)
    assert (off.exactly_once, off.write_id, off.fail_after_batches) == (False, None, None)
    on = parse_sink_options({**base, "exactlyOnce": "TRUE", "writeId": "nightly-2026-11-26"})
    assert (on.exactly_once, on.write_id) == (True, "nightly-2026-11-26")
    with pytest.raises(OptionError, match="exactlyOnce"):
        parse_sink_options({**base, "exactlyOnce": "yes"})


def test_the_broker_takes_a_derived_id_it_never_allocated_and_dedupes_its_retries() -> None:
    """The partition's rules, as the sink relies on them (storage.producer_state)."""
    pid = derive_producer_id("query", 3, 1)
    state = ProducerState("t-0")
    with pytest.raises(UnknownProducerId):  # an unknown producer must start at 0
        state.begin_append().check(pid, 0, 5, 4, 1_000, 0)
    pending = state.begin_append()
    assert isinstance(pending.check(pid, 0, 0, 4, 1_000, 0), Accepted)
    assert isinstance(pending.check(pid, 0, 5, 4, 1_000, 5), Accepted)
    state.commit(pending, 10)
    retry = state.begin_append()
    duplicate = retry.check(pid, 0, 0, 4, 1_000, 10)
    assert isinstance(duplicate, Duplicate)
    with pytest.raises(OutOfOrderSequenceNumber):  # a batch beyond the next one
        retry.check(pid, 0, 20, 4, 1_000, 10)
