"""aiokafka's hand-written protocol structs against our codec, for every version it has.

aiokafka declares its own request and response layouts (aiokafka/protocol/*.py)
independently of Kafka's JSON and of kafka-python; each of its structs whose API
and version we serve must read our bytes to the same values and write them back
byte for byte. These are the layouts aiokafka really sends and expects.
"""

from __future__ import annotations

import importlib
import pkgutil

import aiokafka.protocol
import pytest
from aiokafka.protocol.api import RequestStruct, Response

from protocol.kafka import RequestHeader, decode_request
from protocol.kafka.codec import APIS_BY_KEY
from protocol.kafka.messages import API_VERSIONS
from tests.protocol.kafka.samples import sample, values


def _structs() -> list[tuple[type, bool]]:
    found: dict[str, tuple[type, bool]] = {}
    for info in pkgutil.iter_modules(aiokafka.protocol.__path__):
        module = importlib.import_module(f"aiokafka.protocol.{info.name}")
        for obj in vars(module).values():
            if not isinstance(obj, type) or obj in (RequestStruct, Response):
                continue
            is_request = issubclass(obj, RequestStruct)
            if not (is_request or issubclass(obj, Response)):
                continue
            key, version = getattr(obj, "API_KEY", None), getattr(obj, "API_VERSION", None)
            api = APIS_BY_KEY.get(key) if isinstance(key, int) else None
            if (
                api is not None
                and isinstance(version, int)
                and version in range(api.min_version, api.max_version + 1)
            ):
                found[obj.__qualname__] = (obj, is_request)
    return [found[name] for name in sorted(found)]


# aiokafka structs that disagree with Kafka's schema, for versions aiokafka never sends.
AIOKAFKA_BUGS = {
    # current_leader_epoch declared int64 (Kafka: int32); aiokafka sends ListOffsets <= 3.
    "OffsetRequest_v4",
    "OffsetRequest_v5",
    # v2 declared with v1's non-flexible schema ("Enable flexible version", but not done);
    # aiokafka sends DescribeAcls v0-1 only (its DescribeAclsRequest type lists those).
    "DescribeAclsRequest_v2",
    "DescribeAclsResponse_v2",
}
STRUCTS = [s for s in _structs() if s[0].__name__ not in AIOKAFKA_BUGS]
# aiokafka nests these differently (CreatePartitions: `(count, assignment)` as one struct
# with the assignments as bare arrays) over the same bytes: compared byte for byte only.
AIOKAFKA_NESTING = {"CreatePartitionsRequest_v0", "CreatePartitionsRequest_v1"}


def _plain(value: object) -> object:
    """Nested lists; a one-field struct as its value (aiokafka's Metadata topics are strings);
    aiokafka's empty tagged-field sections (`{}` ending a flexible struct) left out."""
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value if v != {}]
        return items[0] if len(items) == 1 and not isinstance(items[0], list) else items
    return value


def test_aiokafka_covers_the_apis_it_uses():
    names = {cls.__name__ for cls, _ in STRUCTS}
    # aiokafka's ceilings (docs/kafka.md "What the clients send"): its producer, consumer and group
    # versions.
    for expected in (
        "ProduceRequest_v7",
        "FetchResponse_v11",
        "MetadataRequest_v5",
        "OffsetRequest_v3",
        "JoinGroupRequest_v5",
        "SyncGroupResponse_v3",
        "OffsetCommitRequest_v3",
        "OffsetFetchResponse_v3",
        "FindCoordinatorRequest_v1",
        "ApiVersionResponse_v0",
    ):
        assert expected in names


@pytest.mark.parametrize(
    ("cls", "is_request"), [pytest.param(*s, id=s[0].__name__) for s in STRUCTS]
)
def test_aiokafka_reads_and_writes_our_bytes(cls, is_request):
    api = APIS_BY_KEY[cls.API_KEY]
    version = cls.API_VERSION
    fields = api.request if is_request else api.response
    body = sample(fields, version)
    out = bytearray()
    api.codec(version, not is_request).encode(body, out)
    theirs = cls.decode(bytes(out))
    ours = values(fields, version, body)
    if cls.__name__ not in AIOKAFKA_NESTING:
        assert _plain([theirs.get_item(n) for n in cls.SCHEMA.names]) == _plain(ours)
    assert theirs.encode() == bytes(out)


@pytest.mark.parametrize(
    ("cls", "is_request"), [pytest.param(*s, id=s[0].__name__) for s in STRUCTS if s[1]]
)
def test_requests_framed_by_aiokafka_decode(cls, is_request):
    api = APIS_BY_KEY[cls.API_KEY]
    body = sample(api.request, cls.API_VERSION)
    out = bytearray()
    api.codec(cls.API_VERSION, False).encode(body, out)
    request_struct = cls.decode(bytes(out))
    header = request_struct.build_request_header(correlation_id=77, client_id="aiokafka")
    request = decode_request(header.encode() + request_struct.encode())
    assert request.header == RequestHeader(api.key, cls.API_VERSION, 77, "aiokafka")
    assert values(api.request, cls.API_VERSION, request.body) == values(
        api.request, cls.API_VERSION, body
    )


def test_api_versions_v0_is_what_aiokafka_sends():
    assert any(API_VERSIONS.key == cls.API_KEY and cls.API_VERSION == 0 for cls, _ in STRUCTS)
