"""Assignors and the ConsumerProtocol codec: Kafka's bytes, Kafka's examples, properties."""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.assignors import (
    Assignment,
    MalformedConsumerProtocol,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    assign_group,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

ASSIGNORS = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor()]
IDS = [a.name for a in ASSIGNORS]


def kstr(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


# --- the codec ------------------------------------------------------------------------


def test_subscription_v0_bytes_are_kafkas():
    """Built by hand from ConsumerProtocolSubscription.json, version 0."""
    expected = struct.pack(">hi", 0, 2) + kstr("a") + kstr("bb") + struct.pack(">i", -1)
    assert encode_subscription(Subscription(("a", "bb"), version=0)) == expected


def test_subscription_v1_and_assignment_bytes_are_kafkas():
    owned = struct.pack(">i", 1) + kstr("t") + struct.pack(">iii", 2, 0, 3)
    expected = struct.pack(">hi", 1, 1) + kstr("t") + struct.pack(">i", 2) + b"ud" + owned
    sub = Subscription(("t",), b"ud", (("t", 3), ("t", 0)), version=1)
    assert encode_subscription(sub) == expected
    assignment = (
        struct.pack(">hi", 0, 1) + kstr("t") + struct.pack(">iii", 2, 0, 3) + struct.pack(">i", -1)
    )
    assert encode_assignment(Assignment((("t", 0), ("t", 3)))) == assignment


@pytest.mark.parametrize(
    "sub",
    [
        Subscription(("a",), version=0),
        Subscription(("a", "b"), b"x", (("a", 1),), version=1),
        Subscription(("a",), None, (("a", 0),), 7, version=2),
        Subscription(("a",), b"", (), 7, "rack-1", version=3),
        Subscription(("a",), b"", (), 7, None, version=3),
    ],
    ids=["v0", "v1", "v2", "v3", "v3-null-rack"],
)
def test_subscription_round_trip(sub):
    decoded = decode_subscription(encode_subscription(sub))
    assert decoded == Subscription(
        sub.topics,
        sub.user_data,
        tuple(sorted(sub.owned_partitions)),
        sub.generation_id,
        sub.rack_id,
        sub.version,
    )


def test_newer_versions_are_read_as_far_as_known():
    future = bytearray(encode_subscription(Subscription(("a",), None, (), 3, "r", version=3)))
    future[0:2] = struct.pack(">h", 9)
    decoded = decode_subscription(bytes(future) + b"new fields")
    assert (decoded.topics, decoded.generation_id, decoded.rack_id) == (("a",), 3, "r")


def test_empty_assignment_bytes_mean_no_partitions():
    assert decode_assignment(b"") == Assignment(())


@pytest.mark.parametrize(
    "data",
    [b"\x00", b"\x00\x00\x00\x00\x00\x05", b"\xff\xff", b"\x00\x00\x7f\xff\xff\xff"],
    ids=["short-version", "truncated-topics", "negative-version", "huge-count"],
)
def test_malformed_subscription(data):
    with pytest.raises(MalformedConsumerProtocol):
        decode_subscription(data)


@given(st.binary(max_size=80))
def test_any_bytes_decode_or_raise_malformed(data):
    for decode in (decode_subscription, decode_assignment):
        try:
            decode(data)
        except MalformedConsumerProtocol:
            pass


# --- Kafka's documented examples ------------------------------------------------------


def members(*specs: tuple[str, tuple[str, ...]]) -> list[MemberSubscription]:
    return [MemberSubscription(m, None, Subscription(topics)) for m, topics in specs]


def test_range_example_from_kafkas_javadoc():
    """t0, t1 with 3 partitions each, C0 and C1: C0 [t0p0 t0p1 t1p0 t1p1], C1 [t0p2 t1p2]."""
    plan = RangeAssignor().assign(
        {"t0": 3, "t1": 3}, members(("C0", ("t0", "t1")), ("C1", ("t0", "t1")))
    )
    assert plan == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_roundrobin_example_from_kafkas_javadoc():
    """C0 subscribes t0; C1 t0, t1; C2 t0, t1, t2 (1, 2, 3 partitions)."""
    plan = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3},
        members(("C0", ("t0",)), ("C1", ("t0", "t1")), ("C2", ("t0", "t1", "t2"))),
    )
    assert plan == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


def test_static_members_come_first_in_order():
    subs = [
        MemberSubscription("a", None, Subscription(("t",))),
        MemberSubscription("z", "i-1", Subscription(("t",))),
    ]
    assert RangeAssignor().assign({"t": 3}, subs) == {"z": [("t", 0), ("t", 1)], "a": [("t", 2)]}


def test_assign_group_speaks_bytes():
    sticky = StickyAssignor()
    metadata = encode_subscription(sticky.subscription(["t"], [], -1))
    out = assign_group(sticky, {"t": 4}, [("a", None, metadata), ("b", None, metadata)])
    decoded = {m: decode_assignment(b).partitions for m, b in out.items()}
    assert sorted(decoded["a"] + decoded["b"]) == [("t", p) for p in range(4)]
    assert len(decoded["a"]) == len(decoded["b"]) == 2


# --- properties -----------------------------------------------------------------------

topic_counts = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 12), min_size=1
)


@st.composite
def groups(draw, *, uniform: bool = False):
    counts = draw(topic_counts)
    topics = sorted(counts)
    n = draw(st.integers(1, 6))
    if uniform:
        subs = [tuple(topics)] * n
    else:
        subs = [tuple(draw(st.sets(st.sampled_from(topics), min_size=1))) for _ in range(n)]
    return counts, members(*((f"m{i}", s) for i, s in enumerate(subs)))


def check_valid(counts, group, plan):
    """No partition twice; every partition of a subscribed topic assigned; only to subscribers."""
    assigned = Counter(tp for tps in plan.values() for tp in tps)
    assert all(n == 1 for n in assigned.values())
    subscribed = {t for m in group for t in m.subscription.topics}
    assert set(assigned) == {(t, p) for t in subscribed for p in range(counts[t])}
    topics_of = {m.member_id: m.subscription.topics for m in group}
    assert all(t in topics_of[m] for m, tps in plan.items() for t, _ in tps)


@pytest.mark.parametrize("assignor", ASSIGNORS, ids=IDS)
@settings(max_examples=60, deadline=None)
@given(data=groups())
def test_no_overlap_and_full_coverage(assignor, data):
    counts, group = data
    check_valid(counts, group, assignor.assign(counts, group))


@pytest.mark.parametrize(
    "assignor", [RoundRobinAssignor(), StickyAssignor()], ids=["roundrobin", "sticky"]
)
@settings(max_examples=60, deadline=None)
@given(data=groups(uniform=True))
def test_balanced_with_identical_subscriptions(assignor, data):
    counts, group = data
    loads = [len(tps) for tps in assignor.assign(counts, group).values()]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=60, deadline=None)
@given(data=groups(uniform=True))
def test_range_is_balanced_per_topic(data):
    counts, group = data
    plan = RangeAssignor().assign(counts, group)
    for topic in counts:
        loads = [sum(1 for t, _ in tps if t == topic) for tps in plan.values()]
        assert max(loads) - min(loads) <= 1


def with_owned(group, plan, generation=1):
    sticky = StickyAssignor()
    return [
        MemberSubscription(
            m.member_id,
            None,
            decode_subscription(
                encode_subscription(
                    sticky.subscription(
                        m.subscription.topics, plan.get(m.member_id, []), generation
                    )
                )
            ),
        )
        for m in group
    ]


@settings(max_examples=80, deadline=None)
@given(data=groups(uniform=True), leaving=st.integers(0, 5), joining=st.integers(0, 2))
def test_sticky_moves_only_what_balance_requires(data, leaving, joining):
    counts, group = data
    sticky = StickyAssignor()
    before = sticky.assign(counts, group)
    survivors = [m for i, m in enumerate(group) if i != leaving % len(group)] or group
    newcomers = members(*((f"new{i}", group[0].subscription.topics) for i in range(joining)))
    after_group = with_owned(survivors, before) + newcomers
    after = sticky.assign(counts, after_group)
    check_valid(counts, after_group, after)
    loads = [len(tps) for tps in after.values()]
    assert max(loads) - min(loads) <= 1
    total, n = sum(loads), len(after_group)
    for m in survivors:
        kept = set(before[m.member_id]) & set(after[m.member_id])
        # a member keeps everything it had, up to its share of the new balance
        assert len(kept) >= min(len(before[m.member_id]), total // n)


def test_sticky_keeps_everything_when_nothing_changes():
    counts = {"t": 7, "u": 3}
    group = members(("a", ("t", "u")), ("b", ("t", "u")), ("c", ("t", "u")))
    first = StickyAssignor().assign(counts, group)
    assert StickyAssignor().assign(counts, with_owned(group, first)) == first


def test_sticky_contested_partition_goes_to_the_higher_generation():
    sticky = StickyAssignor()
    old = MemberSubscription("a", None, sticky.subscription(["t"], [("t", 0), ("t", 1)], 1))
    new = MemberSubscription("b", None, sticky.subscription(["t"], [("t", 0)], 2))
    plan = sticky.assign({"t": 2}, [old, new])
    assert plan == {"a": [("t", 1)], "b": [("t", 0)]}


def test_sticky_reads_kafka_user_data_from_a_v0_subscription():
    sticky = StickyAssignor()
    v2 = sticky.subscription(["t"], [("t", 2)], 4)
    v0 = Subscription(v2.topics, v2.user_data, version=0)
    decoded = decode_subscription(encode_subscription(v0))
    plan = sticky.assign(
        {"t": 3},
        [
            MemberSubscription("x", None, Subscription(("t",))),
            MemberSubscription("y", None, decoded),
        ],
    )
    assert ("t", 2) in plan["y"]


def test_sticky_prefers_user_data_over_empty_owned_partitions():
    """An eager Kafka consumer sends owned_partitions empty (it revoked them before
    joining) and remembers its assignment in the StickyAssignor user data."""
    sticky = StickyAssignor()
    remembered = sticky.subscription(["t"], [("t", 2), ("t", 3)], 5).user_data
    eager = Subscription(("t",), remembered, (), -1, version=1)
    fresh = MemberSubscription("a", None, Subscription(("t",)))
    plan = sticky.assign({"t": 4}, [fresh, MemberSubscription("b", None, eager)])
    assert plan["b"] == [("t", 2), ("t", 3)]
