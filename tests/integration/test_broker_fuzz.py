"""Hostile input over a live socket (docs/reliability.md BI-01/BI-02): the broker never breaks.

Random bytes, random frames and well-formed envelopes with random bodies go to
the real broker. Every answer must be a proper response, a request-level error
must never be UNKNOWN_SERVER_ERROR (that would be a bug in a handler), and a
well-behaved client must still be served afterwards.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import CONTRACT_APIS, WireClient

pytestmark = pytest.mark.integration

APIS = list(CONTRACT_APIS)
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=80),
    st.sampled_from(["fuzz", "fuzz-2", "..", "", "retention.ms", "earliest", "cleanup.policy"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["topic", "topics", "partitions", "partition", "records", "offset", "acks",
                 "timeout_ms", "max_wait_ms", "min_bytes", "max_bytes", "spec", "timestamp",
                 "configs", "set", "delete", "x"]
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=20,
)  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_broker(
        tmp_path_factory.mktemp("fuzz") / "data",
        "auto.create.topics.enable=false",
        "socket.request.max.bytes=65536",
    )
    with WireClient(broker.address) as admin:
        admin.create_topic("fuzz", 2)
    yield broker
    assert broker.stop() == 0


def _still_serving(broker: BrokerProcess) -> None:
    assert broker.proc.poll() is None
    with WireClient(broker.address) as c:
        assert c.ok("api_versions", {})["server"] == "tidelog"


@FUZZ
@given(api=st.sampled_from(APIS), body=values, request_id=st.integers(0, 2**40))
def test_random_bodies_get_a_proper_answer(
    fuzz_broker: BrokerProcess, api: str, body: object, request_id: int
) -> None:
    with WireClient(fuzz_broker.address) as c:
        c.send_obj({"api": api, "v": 1, "id": request_id, "body": body})
        response = c.recv()
        assert response is not None
        assert response["id"] in (request_id, -1)
        assert response["error"] != "UNKNOWN_SERVER_ERROR", response
        if response["error"] is None:
            assert isinstance(response["body"], dict)
        else:
            assert response["body"] is None and response["message"]
        # request-level errors on a well-formed map keep the connection open
        assert c.ok("api_versions", {})["server"] == "tidelog"


@FUZZ
@given(data=st.binary(max_size=300), framed=st.booleans())
def test_random_bytes_never_break_the_broker(
    fuzz_broker: BrokerProcess, data: bytes, framed: bool
) -> None:
    with WireClient(fuzz_broker.address, timeout_s=30) as c:
        c.send_raw(struct.pack(">I", len(data)) + data if framed else data)
        c.sock.shutdown(1)  # no more from us: the broker answers what it can, then closes
        while True:
            try:
                response = c.recv()
            except (ConnectionResetError, msgpack.ExtraData, ValueError):
                break
            if response is None:
                break
            assert response["error"] != "UNKNOWN_SERVER_ERROR", response
    _still_serving(fuzz_broker)


topics = st.sampled_from(["fuzz", "fuzz-2", "missing", "fuzz.x"])
partitions = st.one_of(st.integers(-2, 3), st.sampled_from([2**31 - 1, -(2**31)]))
int64s = st.one_of(st.integers(-3, 50), st.sampled_from([2**63 - 1, -(2**63)]))
records = st.one_of(
    st.binary(max_size=120),
    st.builds(
        lambda n, flip: _batch_bytes(n, flip),
        st.integers(1, 5),
        st.integers(-1, 60),
    ),
)


def _batch_bytes(n: int, flip: int) -> bytes:
    from protocol.batch import encode_batch

    raw = bytearray(encode_batch([(b"k", b"v" * n, (), 1_700_000_000_000)] * n))
    if 0 <= flip < len(raw):
        raw[flip] ^= 0x5A  # corrupt one byte (or none when flip is -1)
    return bytes(raw)


def _one(field: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries({"topics": st.lists(
        st.fixed_dictionaries({"topic": topics, "partitions": st.lists(
            st.fixed_dictionaries({"partition": partitions, **field}), max_size=3)}),
        max_size=2)})  # fmt: skip


shaped = st.one_of(
    st.tuples(st.just("produce"), _one({"records": records}).map(
        lambda b: {**b, "acks": 1, "timeout_ms": 1000})),
    st.tuples(st.just("fetch"), _one({"offset": int64s, "max_bytes": st.integers(0, 4096)}).map(
        lambda b: {**b, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8192})),
    st.tuples(st.just("list_offsets"), _one({"spec": st.sampled_from(
        ["earliest", "latest", "max_timestamp"])})),
    st.tuples(st.just("offset_for_time"), _one({"timestamp": int64s})),
    st.tuples(st.just("delete_records"), _one({"offset": int64s})),
    st.tuples(st.just("create_topic"), st.fixed_dictionaries(
        {"topic": st.text(max_size=12), "partitions": partitions,
         "configs": st.dictionaries(st.sampled_from(
             ["retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes", "bogus"]),
             scalars, max_size=2)})),
    st.tuples(st.just("alter_configs"), st.fixed_dictionaries(
        {"topic": topics, "set": st.dictionaries(st.sampled_from(
            ["retention.ms", "segment.ms", "message.timestamp.type", "flush.messages"]),
            scalars, max_size=2), "delete": st.lists(st.sampled_from(["retention.ms", "x"]))})),
)  # fmt: skip


@FUZZ
@given(call=shaped)
def test_well_shaped_requests_with_hostile_values(
    fuzz_broker: BrokerProcess, call: tuple[str, dict]
) -> None:
    api, body = call
    with WireClient(fuzz_broker.address) as c:
        response = c.call(api, body)
        assert response["error"] != "UNKNOWN_SERVER_ERROR", response
        for topic in (response["body"] or {}).get("topics", []):
            for part in topic["partitions"]:
                assert part["error"] != "UNKNOWN_SERVER_ERROR", part
