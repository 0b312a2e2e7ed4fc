"""The manifest: KIP-405 transitions, invariants, the JSON format, atomic replacement;
and the object key layout. A hypothesis state machine checks the manifest against a
dict model under random transitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage import failpoints
from storage.fileio import FileIO
from storage.remote import (
    Manifest,
    ManifestFormatError,
    RemoteSegment,
    SegmentState,
    manifest_key,
    manifest_path,
    new_segment_id,
    parse_segment_key,
    partition_prefix,
    read_manifest,
    segment_key,
    segment_keys,
    write_manifest,
)

S = SegmentState


def entry(
    base: int, end: int, state: S = S.COPY_SEGMENT_STARTED, sid: str | None = None
) -> RemoteSegment:
    return RemoteSegment(
        segment_id=sid or new_segment_id(),
        base_offset=base,
        end_offset=end,
        size_bytes=100 * (end - base + 1),
        base_timestamp_ms=1000 + base,
        max_timestamp_ms=1000 + end,
        layouts=1,
        state=state,
        updated_ms=5,
    )


def test_key_layout() -> None:
    sid = "0123456789abcdef0123456789abcdef"
    assert partition_prefix("tidelog", "orders", 3) == "tidelog/orders-3/"
    assert partition_prefix("", "orders", 3) == "orders-3/"
    key = segment_key("tidelog", "orders", 3, 42, sid, ".log")
    assert key == f"tidelog/orders-3/00000000000000000042-{sid}.log"
    assert manifest_key("a/b", "t", 0) == "a/b/t-0/manifest.json"
    keys = segment_keys("p", "t", 0, 7, sid)
    assert sorted(keys) == sorted([".log", ".index", ".timeindex", ".snapshot", ".txnindex"])
    parsed = parse_segment_key(keys[".timeindex"])
    assert parsed is not None
    assert (parsed.base_offset, parsed.segment_id, parsed.suffix) == (7, sid, ".timeindex")
    assert parse_segment_key("p/t-0/manifest.json") is None
    assert parse_segment_key(f"p/t-0/00000000000000000007-{sid}.deleted") is None
    with pytest.raises(ValueError):
        segment_key("p", "t", 0, 7, "not-an-id", ".log")
    assert new_segment_id() != new_segment_id()


def test_transitions_follow_kip_405() -> None:
    first = entry(0, 9)
    m = Manifest("t", 0).with_segment(first)
    assert m.readable() == ()
    m = m.with_state(first.segment_id, S.COPY_SEGMENT_FINISHED, 10)
    assert [s.segment_id for s in m.readable()] == [first.segment_id]
    assert m.get(first.segment_id).updated_ms == 10  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="not a valid transition"):
        m.with_state(first.segment_id, S.COPY_SEGMENT_STARTED, 11)
    with pytest.raises(ValueError, match="not a valid transition"):
        m.with_state(first.segment_id, S.DELETE_SEGMENT_FINISHED, 11)
    m = m.with_state(first.segment_id, S.DELETE_SEGMENT_STARTED, 12)
    assert m.readable() == ()
    m = m.with_state(first.segment_id, S.DELETE_SEGMENT_FINISHED, 13)
    assert m.live() == ()
    # An orphan copy goes straight to deletion.
    orphan = entry(10, 19)
    m = m.with_segment(orphan).with_state(orphan.segment_id, S.DELETE_SEGMENT_STARTED, 14)
    assert m.in_state(S.DELETE_SEGMENT_STARTED) == (m.get(orphan.segment_id),)
    with pytest.raises(ValueError, match="starts as COPY_SEGMENT_STARTED"):
        m.with_segment(entry(20, 29, S.COPY_SEGMENT_FINISHED))
    with pytest.raises(ValueError, match="already"):
        m.with_segment(orphan)


def test_readable_segments_never_overlap() -> None:
    a, b = entry(0, 9), entry(5, 14)
    m = Manifest("t", 0).with_segment(a).with_segment(b)  # two copies in flight is fine
    m = m.with_state(a.segment_id, S.COPY_SEGMENT_FINISHED, 1)
    with pytest.raises(ManifestFormatError, match="overlap"):
        m.with_state(b.segment_id, S.COPY_SEGMENT_FINISHED, 2)


def test_covers_and_remote_end_offset() -> None:
    m = Manifest("t", 0)
    assert m.remote_end_offset == -1
    for base, end in ((0, 9), (10, 19), (30, 39)):
        e = entry(base, end)
        m = m.with_segment(e).with_state(e.segment_id, S.COPY_SEGMENT_FINISHED, 1)
    assert m.remote_end_offset == 40
    assert m.covers(0, 20) and m.covers(5, 15) and m.covers(30, 40)
    assert not m.covers(0, 21) and not m.covers(20, 30) and not m.covers(35, 41)


def test_json_format_round_trip(tmp_path: Path) -> None:
    e = entry(0, 99, sid="0" * 32)
    m = Manifest("orders", 2, log_start_offset=0).with_segment(e)
    m = m.with_state(e.segment_id, S.COPY_SEGMENT_FINISHED, 7).with_log_start_offset(50)
    raw = json.loads(m.encode())
    assert raw == {
        "version": 1,
        "topic": "orders",
        "partition": 2,
        "log_start_offset": 50,
        "segments": [
            {
                "segment_id": "0" * 32,
                "base_offset": 0,
                "end_offset": 99,
                "size_bytes": 10000,
                "base_timestamp_ms": 1000,
                "max_timestamp_ms": 1099,
                "layouts": 1,
                "state": "COPY_SEGMENT_FINISHED",
                "updated_ms": 7,
                "has_txn_index": True,
            }
        ],
    }
    assert Manifest.decode(m.encode()) == m
    # A manifest written before `has_txn_index` existed reads as True (look for it).
    del raw["segments"][0]["has_txn_index"]
    assert Manifest.decode(json.dumps(raw).encode()).segments[0].has_txn_index is True
    raw["segments"][0]["has_txn_index"] = "no"
    with pytest.raises(ManifestFormatError, match="has_txn_index"):
        Manifest.decode(json.dumps(raw).encode())
    io = FileIO()
    assert read_manifest(io, tmp_path) is None
    data = write_manifest(io, tmp_path, m)
    assert manifest_path(tmp_path).read_bytes() == data
    assert read_manifest(io, tmp_path) == m
    assert m.with_log_start_offset(10).log_start_offset == 50  # never moves back


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"{", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"version": 2}', "version"),
        (b'{"version": 1, "topic": "t", "partition": -1, "log_start_offset": 0, "segments": []}',
         "partition"),
        (b'{"version": 1, "topic": "t", "partition": 0, "log_start_offset": 0, "segments": [{}]}',
         "not an integer"),
    ],
)  # fmt: skip
def test_malformed_manifest_is_refused_not_reset(tmp_path: Path, text: bytes, problem: str) -> None:
    manifest_path(tmp_path).write_bytes(text)
    with pytest.raises(ManifestFormatError, match=problem):
        read_manifest(FileIO(), tmp_path)


def test_bad_state_and_duplicate_ids_are_refused() -> None:
    e = entry(0, 9, sid="a" * 32).to_json()
    doc = {"version": 1, "topic": "t", "partition": 0, "log_start_offset": 0}
    with pytest.raises(ManifestFormatError, match="state"):
        Manifest.decode(json.dumps({**doc, "segments": [{**e, "state": "UPLOADED"}]}).encode())
    with pytest.raises(ManifestFormatError, match="duplicate"):
        Manifest.decode(json.dumps({**doc, "segments": [e, e]}).encode())


@pytest.mark.parametrize("point", ["before_write", "before_rename", "after_rename"])
def test_failed_write_leaves_old_or_new_manifest(tmp_path: Path, point: str) -> None:
    io = FileIO()
    old = Manifest("t", 0).with_segment(entry(0, 9))
    write_manifest(io, tmp_path, old)
    new = old.with_segment(entry(10, 19))
    failpoints.configure(f"remote_manifest.{point}=eio")
    try:
        with pytest.raises(OSError):
            write_manifest(io, tmp_path, new)
    finally:
        failpoints.configure("")
    assert read_manifest(io, tmp_path) == (new if point == "after_rename" else old)


def test_finished_deletions_are_pruned() -> None:
    m = Manifest("t", 0)
    for i in range(150):
        e = entry(i * 10, i * 10 + 9)
        m = m.with_segment(e)
        for n, state in enumerate((S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                                   S.DELETE_SEGMENT_FINISHED)):  # fmt: skip
            m = m.with_state(e.segment_id, state, i * 10 + n)
    assert len(m.segments) == 100
    assert m.segments[0].base_offset == 500  # the oldest went first


class ManifestMachine(RuleBasedStateMachine):
    """The manifest against a dict model: segment id -> state."""

    def __init__(self) -> None:
        super().__init__()
        self.manifest = Manifest("t", 0)
        self.model: dict[str, S] = {}
        self.next_base = 0
        self.clock = 0

    @rule(length=st.integers(1, 20))
    def start_copy(self, length: int) -> None:
        e = entry(self.next_base, self.next_base + length - 1)
        self.next_base += length
        self.manifest = self.manifest.with_segment(e)
        self.model[e.segment_id] = S.COPY_SEGMENT_STARTED

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), target_state=st.sampled_from(list(S)))
    def transition(self, data: st.DataObject, target_state: S) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model)))
        self.clock += 1
        allowed = {
            S.COPY_SEGMENT_STARTED: {S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED},
            S.COPY_SEGMENT_FINISHED: {S.DELETE_SEGMENT_STARTED},
            S.DELETE_SEGMENT_STARTED: {S.DELETE_SEGMENT_FINISHED},
            S.DELETE_SEGMENT_FINISHED: set(),
        }[self.model[sid]]
        if target_state in allowed:
            self.manifest = self.manifest.with_state(sid, target_state, self.clock)
            self.model[sid] = target_state
        else:
            with pytest.raises(ValueError):
                self.manifest.with_state(sid, target_state, self.clock)

    @rule()
    def round_trip(self) -> None:
        assert Manifest.decode(self.manifest.encode()) == self.manifest

    @invariant()
    def agrees_with_model(self) -> None:
        assert {s.segment_id: s.state for s in self.manifest.segments} == self.model
        readable = [s.segment_id for s in self.manifest.readable()]
        assert sorted(readable) == sorted(
            k for k, v in self.model.items() if v is S.COPY_SEGMENT_FINISHED
        )


TestManifestMachine = ManifestMachine.TestCase
TestManifestMachine.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
