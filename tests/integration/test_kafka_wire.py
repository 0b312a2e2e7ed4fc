"""Bad Kafka requests against the real broker: Kafka's error codes where Kafka answers,
a closed connection where it does not, and never a disturbed neighbour.

Each test keeps a second connection open across the abuse and checks it still gets
answers afterwards. Good requests are encoded by protocol.kafka (checked against
kafka-python's and aiokafka's codecs in tests/protocol/kafka/); the bad ones are
bytes written by hand.
"""

from __future__ import annotations

import struct
import time
import warnings
from collections.abc import Iterator

import pytest

import tidelog
from protocol import batch as tidelog_batch
from protocol.kafka import records as kafka_records
from protocol.kafka.codec import decode_response
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import (
    API_VERSIONS,
    END_TXN,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
)
from tests.conftest import BrokerProcess, start_broker
from tests.integration.kafka_helpers import KafkaSocket

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = pytest.mark.integration

UNSUPPORTED_VERSION = ERRORS_BY_NAME["UNSUPPORTED_VERSION"].code
INVALID_REQUEST = ERRORS_BY_NAME["INVALID_REQUEST"].code
CORRUPT_MESSAGE = ERRORS_BY_NAME["CORRUPT_MESSAGE"].code
INVALID_REQUIRED_ACKS = ERRORS_BY_NAME["INVALID_REQUIRED_ACKS"].code
FETCH_SESSION_ID_NOT_FOUND = ERRORS_BY_NAME["FETCH_SESSION_ID_NOT_FOUND"].code
UNKNOWN_TOPIC_OR_PARTITION = ERRORS_BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"].code
OFFSET_OUT_OF_RANGE = ERRORS_BY_NAME["OFFSET_OUT_OF_RANGE"].code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("kafka-wire") / "data")
    yield process
    assert process.stop() == 0


@pytest.fixture
def neighbour(broker: BrokerProcess) -> Iterator[KafkaSocket]:
    """A connection opened before the abuse; it must keep working after it."""
    with KafkaSocket(broker.address) as sock:
        assert sock.call(API_VERSIONS, 2, {})["error_code"] == 0
        yield sock
        answer = sock.call(METADATA, 8, {"topics": None})
        assert answer["brokers"][0]["port"] == broker.port


def _batch(value: bytes = b"value", producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """One Kafka v2 batch written by kafka-python's own record builder; `producer` is
    (producer id, epoch, base sequence)."""
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
        producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _fetch(sock: KafkaSocket, topic: str, offset: int, *, session_id: int = 0,
           epoch: int = -1) -> dict:  # fmt: skip
    return sock.call(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip


def _produce(sock: KafkaSocket, topic: str, records: bytes, *, version: int = 7, acks: int = 1):
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }
    return sock.call(PRODUCE, version, body)["responses"][0]["partition_responses"][0]


def test_api_versions_lists_what_is_served(neighbour: KafkaSocket) -> None:
    answer = neighbour.call(API_VERSIONS, 3, {"client_software_name": "t",
                                               "client_software_version": "1"})  # fmt: skip
    ranges = {a["api_key"]: (a["min_version"], a["max_version"]) for a in answer["api_keys"]}
    assert ranges[PRODUCE.key] == (0, 13)
    assert ranges[FETCH.key] == (4, 18)
    assert ranges[LIST_OFFSETS.key] == (1, 10)
    assert ranges[METADATA.key] == (0, 13)
    assert ranges[API_VERSIONS.key] == (0, 5)
    assert answer["finalized_features"] == [
        {"name": "metadata.version", "max_version_level": 33, "min_version_level": 33}
    ]


@pytest.mark.parametrize(
    ("cluster_id", "node_id", "error"),
    [
        (None, -1, "NONE"),  # a bootstrap connection: no cluster known yet
        ("tidelog", 1, "NONE"),  # the cluster and node Metadata named
        ("another", 1, "REBOOTSTRAP_REQUIRED"),  # stale metadata, as Kafka 4.4 answers
        ("tidelog", 7, "REBOOTSTRAP_REQUIRED"),
        ("tidelog", -1, "INVALID_REQUEST"),  # a cluster without a node
        (None, 1, "INVALID_REQUEST"),
    ],
)
def test_api_versions_v5_as_kafka_4_4s_java_clients_send_it(
    neighbour: KafkaSocket, cluster_id: str | None, node_id: int, error: str
) -> None:
    """Answered at v5 (no KIP-511 round trip); a wrong cluster or node refused."""
    body = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0",
            "cluster_id": cluster_id, "node_id": node_id}  # fmt: skip
    answer = neighbour.call(API_VERSIONS, 5, body)
    assert answer["error_code"] == ERRORS_BY_NAME[error].code
    if error == "NONE":
        ranges = {a["api_key"]: a["max_version"] for a in answer["api_keys"]}
        assert ranges[API_VERSIONS.key] == 5
    else:
        assert answer["api_keys"] == []


@pytest.mark.parametrize(("name", "version"), [("", "1"), ("bad name", "1"), ("kgo", "-1")])
def test_api_versions_refuses_what_kafka_refuses_as_software(
    neighbour: KafkaSocket, name: str, version: str
) -> None:
    body = {"client_software_name": name, "client_software_version": version}
    assert neighbour.call(API_VERSIONS, 3, body)["error_code"] == INVALID_REQUEST


def test_api_versions_newer_than_ours_gets_kip_511_answer(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """ApiVersions v9 (flexible, header v2): the v0 layout, UNSUPPORTED_VERSION, our ranges."""
    with KafkaSocket(broker.address) as sock:
        body = b"\x00\x12\x00\x09\x00\x00\x00\x2a" + b"\x00\x01t" + b"\x00" + b"\x02t\x021\x00"
        sock.send_raw(struct.pack(">i", len(body)) + body)
        frame = sock.recv_frame()
        assert frame is not None
        answer = decode_response(frame, API_VERSIONS, 0)
        assert answer.correlation_id == 42
        assert answer.body["error_code"] == UNSUPPORTED_VERSION
        assert {a["api_key"] for a in answer.body["api_keys"]} >= {0, 1, 2, 3, 18}
        # The client retries at a version we serve, on the same connection.
        assert sock.call(API_VERSIONS, 0, {})["error_code"] == 0


def test_unknown_api_key_closes_only_that_connection(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """An API key Kafka has no layout for: the connection closes, as Kafka's does."""
    with KafkaSocket(broker.address) as sock:
        sock.call(API_VERSIONS, 0, {})  # a Kafka connection (its first bytes say so)
        body = struct.pack(">hhih", 999, 0, 7, -1)
        sock.send_raw(struct.pack(">i", len(body)) + body)
        assert sock.closed_by_peer()


def test_version_out_of_range_without_error_field_closes(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """Metadata v14 (beyond our table) has no answer layout: closed, as in Kafka."""
    with KafkaSocket(broker.address) as sock:
        body = struct.pack(">hhih", METADATA.key, 14, 7, -1) + b"\x00" + b"\x01\x00\x00\x00"
        sock.send_raw(struct.pack(">i", len(body)) + body)
        assert sock.closed_by_peer()


def test_a_table_ahead_of_its_handler_is_neither_advertised_nor_served(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """A schema in messages.py without a row serving that version (EndTxn v5, KIP-890
    part 2, which the coordinator does not serve): not in ApiVersions, and refused as
    an unknown version is."""
    answer = neighbour.call(API_VERSIONS, 3, {"client_software_name": "t",
                                               "client_software_version": "1"})  # fmt: skip
    ranges = {a["api_key"]: (a["min_version"], a["max_version"]) for a in answer["api_keys"]}
    assert ranges[END_TXN.key] == (0, 4)
    assert END_TXN.max_version == 5
    assert ranges[INIT_PRODUCER_ID.key][1] < INIT_PRODUCER_ID.max_version  # v6: 2PC
    body = {"transactional_id": "t", "producer_id": 1, "producer_epoch": 0, "committed": True}
    with KafkaSocket(broker.address) as sock:
        sock.call(API_VERSIONS, 0, {})
        sock.send_raw(sock.request_bytes(END_TXN, 5, body))  # as an unknown version: closed
        assert sock.closed_by_peer()


@pytest.mark.parametrize("size", [0x7FFFFFFF, -5])
def test_absurd_frame_size_closes_before_buffering(
    broker: BrokerProcess, neighbour: KafkaSocket, size: int
) -> None:
    with KafkaSocket(broker.address) as sock:
        # A plausible first request, then a frame announcing an absurd size.
        sock.call(API_VERSIONS, 0, {})
        sock.send_raw(struct.pack(">i", size) + b"\x00\x03")
        assert sock.closed_by_peer()


def test_truncated_request_is_answered_where_kafka_can(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """A truncated ApiVersions v3 body gets INVALID_REQUEST (its response has an error
    code); a truncated Produce closes the connection (its response has none)."""
    with KafkaSocket(broker.address) as sock:
        whole = sock.request_bytes(API_VERSIONS, 3, {"client_software_name": "abc",
                                                     "client_software_version": "1.0"})  # fmt: skip
        cut = whole[4:-4]
        sock.send_raw(struct.pack(">i", len(cut)) + cut)
        frame = sock.recv_frame()
        assert frame is not None
        assert decode_response(frame, API_VERSIONS, 0).body["error_code"] == INVALID_REQUEST
        produce = sock.request_bytes(PRODUCE, 7, {
            "transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": _batch()}]}],
        })[4:-10]  # fmt: skip
        sock.send_raw(struct.pack(">i", len(produce)) + produce)
        assert sock.closed_by_peer()


def test_wrong_crc_is_corrupt_message_and_the_connection_stays(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    with KafkaSocket(broker.address) as sock:
        batch = bytearray(_batch())
        batch[-1] ^= 0xFF  # a record byte: the CRC no longer matches
        assert _produce(sock, "crc-topic", bytes(batch))["error_code"] == CORRUPT_MESSAGE
        good = _produce(sock, "crc-topic", _batch())
        assert (good["error_code"], good["base_offset"]) == (0, 0)


def test_produce_v2_unsupported_and_bad_acks(broker: BrokerProcess, neighbour: KafkaSocket) -> None:
    """Produce v0-2 are advertised (old librdkafka needs that) but refused, as in Kafka 4."""
    with KafkaSocket(broker.address) as sock:
        old = _produce(sock, "v2-topic", _batch(), version=2)
        assert old["error_code"] == UNSUPPORTED_VERSION
        assert _produce(sock, "v2-topic", _batch(), acks=2)["error_code"] == INVALID_REQUIRED_ACKS
        assert _produce(sock, "v2-topic", _batch(), acks=-1)["error_code"] == 0


def test_fetch_sessions_declined_and_errors_per_partition(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    with KafkaSocket(broker.address) as sock:
        assert _produce(sock, "fetch-topic", _batch())["error_code"] == 0

        opened = _fetch(sock, "fetch-topic", 0, epoch=0)  # asks for a session: declined, full fetch
        assert (opened["error_code"], opened["session_id"]) == (0, 0)
        part = opened["responses"][0]["partitions"][0]
        assert (part["high_watermark"], part["last_stable_offset"]) == (1, 1)
        assert part["records"][16] == 2  # a Kafka v2 batch: magic 2 at byte 16
        stale = _fetch(sock, "fetch-topic", 0, session_id=77, epoch=1)
        assert stale["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        missing = _fetch(sock, "no-such-topic", 0)["responses"][0]["partitions"][0]
        assert missing["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
        past = _fetch(sock, "fetch-topic", 5)["responses"][0]["partitions"][0]
        assert past["error_code"] == OFFSET_OUT_OF_RANGE


def test_list_offsets_max_timestamp_needs_v7(broker: BrokerProcess, neighbour: KafkaSocket) -> None:
    """Max-timestamp lookups (-3) exist from ListOffsets v7, beyond what we serve."""
    with KafkaSocket(broker.address) as sock:
        assert _produce(sock, "lo-topic", _batch())["error_code"] == 0

        def lookup(timestamp: int) -> tuple[int, int]:
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "lo-topic",
                    "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                    "timestamp": timestamp}]}]}  # fmt: skip
            [part] = sock.call(LIST_OFFSETS, 5, body)["topics"][0]["partitions"]
            return part["error_code"], part["offset"]

        assert [lookup(ts) for ts in (-2, -1, -3)] == [(0, 0), (0, 1), (UNSUPPORTED_VERSION, -1)]


def test_producer_fields_reach_storage_and_come_back(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """Producer id, epoch and base sequence cross the edge both ways: stored in the
    Tidelog batch (what storage's producer checks read) and fetched back by Kafka."""
    with KafkaSocket(broker.address) as sock:
        sent = _batch(producer=(4321, 3, 0))
        assert _produce(sock, "pid-topic", sent)["error_code"] == 0
        records = _fetch(sock, "pid-topic", 0)["responses"][0]["partitions"][0]["records"]
        fetched = kafka_records.read_batch_header(records)
        assert (fetched.producer_id, fetched.producer_epoch, fetched.base_sequence) == (4321, 3, 0)
    with tidelog.Client(broker.bootstrap) as client:
        stored = tidelog_batch.read_header(client.fetch("pid-topic", 0, 0).records)
    assert (stored.producer_id, stored.producer_epoch, stored.base_sequence) == (4321, 3, 0)


def test_pipelined_requests_answered_in_order(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """Requests sent back to back without waiting: durable produces (answered after
    their fsync, beside the later requests) and metadata calls come back in order."""
    with KafkaSocket(broker.address) as sock:
        sent = []
        for i in range(6):
            body = {"transactional_id": None, "acks": -1 if i % 2 == 0 else 1, "timeout_ms": 5000,
                    "topic_data": [{"name": "pipe", "partition_data": [
                        {"index": 0, "records": _batch(b"v%d" % i)}]}]}  # fmt: skip
            sent.append((PRODUCE, 7, sock.request_bytes(PRODUCE, 7, body)))
            sent.append((METADATA, 8, sock.request_bytes(METADATA, 8, {"topics": None})))
        sock.send_raw(b"".join(frame for _, _, frame in sent))
        answers = []
        for api, version, _ in sent:
            frame = sock.recv_frame()
            assert frame is not None
            answers.append(decode_response(frame, api, version))
        assert [a.correlation_id for a in answers] == list(range(1, 13))
        offsets = [a.body["responses"][0]["partition_responses"][0]["base_offset"]
                   for a in answers[::2]]  # fmt: skip
        assert offsets == list(range(6))


def test_fetch_long_polls_until_a_record_arrives(
    broker: BrokerProcess, neighbour: KafkaSocket
) -> None:
    """A Kafka fetch at the end of the log waits (max_wait_ms) and answers as soon as
    another connection appends, through the native fetch's long poll."""
    with KafkaSocket(broker.address) as sock, KafkaSocket(broker.address) as producer:
        assert _produce(producer, "poll-topic", _batch(b"first"))["error_code"] == 0
        body = {
            "replica_id": -1, "max_wait_ms": 10_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "poll-topic", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }  # fmt: skip
        started = time.monotonic()
        sock.send_raw(sock.request_bytes(FETCH, 11, body))
        time.sleep(0.5)
        assert _produce(producer, "poll-topic", _batch(b"second"))["error_code"] == 0
        frame = sock.recv_frame()
        waited = time.monotonic() - started
        assert frame is not None
        [part] = decode_response(frame, FETCH, 11).body["responses"][0]["partitions"]
        assert part["high_watermark"] == 2
        assert kafka_records.read_batch_header(part["records"]).base_offset == 1
        assert 0.5 <= waited < 5.0
