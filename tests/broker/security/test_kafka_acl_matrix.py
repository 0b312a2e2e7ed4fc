"""The Kafka side of the ACL matrix: every Kafka API the registry serves, on the wire.

An in-process broker (serve_broker) with `authorizer=on` and a SASL_PLAINTEXT
listener; each connection logs in with kafka-python's SaslHandshake and
SaslAuthenticate request classes (PLAIN), then sends requests kafka-python's
`kafka.protocol` classes encode and decodes the answers with them. For each API,
alice (granted what Kafka's authorizer asks for it) gets through, and bob (granted
nothing) gets Kafka's code in Kafka's place. docs/security.md has the table.
"""

from __future__ import annotations

import gc
import struct
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.kafka.registry import KAFKA_HANDLERS
from harness.kafka_python import kp_class
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import API_VERSIONS
from protocol.offsets_schema import commit_offsets
from tests.broker.security.conftest import add_user
from tests.broker.security.test_sasl_acl_inprocess import _records, grant, user
from tidelog.aio import open_client

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

TOPIC_DENIED = ERRORS_BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code
GROUP_DENIED = ERRORS_BY_NAME["GROUP_AUTHORIZATION_FAILED"].code
CLUSTER_DENIED = ERRORS_BY_NAME["CLUSTER_AUTHORIZATION_FAILED"].code
SASL_FAILED = ERRORS_BY_NAME["SASL_AUTHENTICATION_FAILED"].code
MEMBER_ID_REQUIRED = ERRORS_BY_NAME["MEMBER_ID_REQUIRED"].code
UNKNOWN_MEMBER_ID = ERRORS_BY_NAME["UNKNOWN_MEMBER_ID"].code
NO_PRODUCER_ID_MAPPING = ERRORS_BY_NAME["INVALID_PRODUCER_ID_MAPPING"].code
TXN_ID_NOT_FOUND = ERRORS_BY_NAME["TRANSACTIONAL_ID_NOT_FOUND"].code
TXN_ID_DENIED = ERRORS_BY_NAME["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"].code
OK = 0

SETTINGS = (
    "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=PLAIN",
    "authorizer=on",
    "super.users=User:admin",
    "connection.failed.authentication.delay.ms=0",
)
# alice holds what Kafka's authorizer asks for each API on topic orders (orders-*
# for Create), group billing and the cluster; bob holds nothing.
ALICE_ACLS = (
    "Allow User:alice Write Topic Literal orders",
    "Allow User:alice Read Topic Literal orders",
    "Allow User:alice Delete Topic Literal orders",
    "Allow User:alice AlterConfigs Topic Literal orders",
    "Allow User:alice Alter Topic Literal orders",
    "Allow User:alice Create Topic Prefixed orders-",
    "Allow User:alice Read Group Literal billing",
    "Allow User:alice Delete Group Literal billing",
    "Allow User:alice Alter Cluster Literal kafka-cluster",
    "Allow User:alice AlterConfigs Cluster Literal kafka-cluster",
    "Allow User:alice Write TransactionalId Literal tx-a",
)


@pytest.fixture(autouse=True, scope="module")
def _collect_earlier_garbage() -> Iterator[None]:
    """Collect what earlier modules left for the garbage collector first: the
    kafka-python clients of tests/integration/test_kafka_security.py leave wake-up
    socketpairs (AF_UNIX) whose ResourceWarning would be blamed on a test here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    yield


def build(cls: Any, fields: dict[str, Any]) -> Any:
    """A kafka-python message (or nested struct) from plain dicts and lists."""
    out = {}
    for name, value in fields.items():
        field = cls._struct.fields[name] if hasattr(cls, "_struct") else cls.fields[name]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            nested = getattr(cls, field.type_str.removeprefix("[]"))
            value = [build(nested, v) for v in value]
        out[name] = value
    return cls(**out)


class KafkaWire:
    """A Kafka connection speaking through kafka-python's request and response classes."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.correlation = 0
        self.buffer = b""

    async def __aenter__(self) -> KafkaWire:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stream.aclose()

    async def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        request_cls = kp_class(api_key, True)[version]
        message = build(request_cls, fields)
        message.with_header(correlation_id=self.correlation, client_id="matrix")
        await self.stream.send_all(bytes(message.encode(header=True, framed=True)))
        frame = await self._frame()
        answer = kp_class(api_key, False)[version].decode(frame, header=True, framed=True)
        assert answer.header.correlation_id == self.correlation
        return answer

    async def _frame(self) -> bytes:
        while (
            len(self.buffer) < 4 or len(self.buffer) < 4 + struct.unpack(">i", self.buffer[:4])[0]
        ):
            data = await self.stream.receive_some(65536)
            assert data, "the broker closed the connection"
            self.buffer += data
        size = 4 + struct.unpack(">i", self.buffer[:4])[0]
        frame, self.buffer = self.buffer[:size], self.buffer[size:]
        return frame

    async def login(self, name: str, password: str) -> Any:
        """SaslHandshake v1 then SaslAuthenticate v1 (PLAIN); the SaslAuthenticate answer."""
        shake = await self.ask(17, 1, mechanism="PLAIN")
        assert shake.error_code == OK and shake.mechanisms == ["PLAIN"]
        token = b"\0" + name.encode() + b"\0" + password.encode()
        return await self.ask(36, 1, auth_bytes=token)


def kafka_batch(value_bytes: int = 1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"v" * value_bytes, headers=[])
    return bytes(builder.build())


def _acl_filter(**extra: Any) -> dict[str, Any]:
    return {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1,
        **extra,
    }  # fmt: skip


def _topic_config(name: str, **extra: Any) -> dict[str, Any]:
    return {"resource_type": 2, "resource_name": name, **extra}


@dataclass(frozen=True)
class Row:
    """One Kafka API: a request, where its answer puts the code, and the codes expected."""

    api: str
    key: int
    version: int
    fields: dict[str, Any]
    code: Callable[[Any], int]
    allowed: int
    denied: int
    # Who asks: by default alice (granted) and bob (nothing); rows about a topic alice
    # may not touch inside a group she may use are asked by admin and alice.
    users: tuple[str, str] = ("alice", "bob")


def _part(answer: Any, topics: str, parts: str = "partitions") -> int:
    return getattr(getattr(answer, topics)[0], parts)[0].error_code


ADD_PARTITIONS = {
    "v3_and_below_transactional_id": "tx-a",
    "v3_and_below_producer_id": 0,
    "v3_and_below_producer_epoch": 0,
    "v3_and_below_topics": [{"name": "orders", "partitions": [0]}],
}


def _added(answer: Any) -> int:
    return int(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


JOIN = {
    "group_id": "billing", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
    "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b""}],
}  # fmt: skip


RENAMED = {"orders": "payments", "orders-new": "payments"}


def _renamed(value: Any) -> Any:
    """`value` with topic orders (and orders-new) renamed payments."""
    if isinstance(value, dict):
        return {k: _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return RENAMED.get(value, value) if isinstance(value, str) else value


def _topic_rows() -> list[Row]:
    """Rows about topic payments, which alice may not touch: denied per topic or
    partition while her group and cluster rights hold (admin, a super user, succeeds)."""
    rows = []
    for row in ROWS:
        if row.users != ("alice", "bob"):
            continue
        if row.denied != TOPIC_DENIED and row.api not in TOPIC_ALSO:
            continue
        fields = _renamed(row.fields)
        allowed = (
            ERRORS_BY_NAME["TOPIC_ALREADY_EXISTS"].code
            if row.api == "CreateTopics"
            else row.allowed
        )
        rows.append(
            Row(
                f"{row.api}(topic)",
                row.key,
                row.version,
                fields,
                row.code,
                allowed,
                TOPIC_DENIED,
                ("admin", "alice"),
            )
        )
    return rows


ROWS = [
    Row(
        "Produce",
        0,
        7,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [
                {"name": "orders", "partition_data": [{"index": 0, "records": kafka_batch()}]}
            ],
        },
        lambda a: _part(a, "responses", "partition_responses"),
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "Fetch",
        1,
        4,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
        lambda a: _part(a, "responses"),
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "ListOffsets",
        2,
        1,
        {
            "replica_id": -1,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        lambda a: _part(a, "topics"),
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "Metadata",
        3,
        4,
        {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False},
        lambda a: a.topics[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "OffsetCommit",
        8,
        2,
        {
            "group_id": "billing",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                    ],
                }
            ],
        },
        lambda a: _part(a, "topics"),
        OK,
        GROUP_DENIED,
    ),
    Row(
        "OffsetFetch",
        9,
        3,
        {
            "group_id": "billing",
            "topics": [{"name": "orders", "partition_indexes": [0]}],
        },
        lambda a: a.error_code or _part(a, "topics"),
        OK,
        GROUP_DENIED,
    ),
    Row(
        "FindCoordinator",
        10,
        1,
        {"key": "billing", "key_type": 0},
        lambda a: a.error_code,
        OK,
        GROUP_DENIED,
    ),
    Row("JoinGroup", 11, 4, JOIN, lambda a: a.error_code, MEMBER_ID_REQUIRED, GROUP_DENIED),
    Row(
        "Heartbeat",
        12,
        1,
        {"group_id": "billing", "generation_id": 1, "member_id": "m"},
        lambda a: a.error_code,
        UNKNOWN_MEMBER_ID,
        GROUP_DENIED,
    ),
    Row(
        "LeaveGroup",
        13,
        1,
        {"group_id": "billing", "member_id": "m"},
        lambda a: a.error_code,
        UNKNOWN_MEMBER_ID,
        GROUP_DENIED,
    ),
    Row(
        "SyncGroup",
        14,
        1,
        {
            "group_id": "billing",
            "generation_id": 1,
            "member_id": "m",
            "assignments": [],
        },
        lambda a: a.error_code,
        UNKNOWN_MEMBER_ID,
        GROUP_DENIED,
    ),
    Row(
        "DescribeGroups",
        15,
        1,
        {"groups": ["billing"]},
        lambda a: a.groups[0].error_code,
        OK,
        GROUP_DENIED,
    ),
    Row("ApiVersions", API_VERSIONS.key, 1, {}, lambda a: a.error_code, OK, OK),
    Row(
        "CreateTopics",
        19,
        2,
        {
            "topics": [
                {
                    "name": "orders-new",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 5000,
            "validate_only": False,
        },
        lambda a: a.topics[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DeleteTopics",
        20,
        1,
        {"topic_names": ["orders"], "timeout_ms": 5000},
        lambda a: a.responses[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DeleteTopics(unknown)",
        20,
        1,
        {"topic_names": ["nowhere"], "timeout_ms": 5000},
        lambda a: a.responses[0].error_code,
        ERRORS_BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"].code,  # told only who may describe it
        TOPIC_DENIED,
        ("admin", "bob"),
    ),
    Row(
        "DeleteRecords",
        21,
        0,
        {
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 0}]}],
            "timeout_ms": 5000,
        },
        lambda a: _part(a, "topics"),
        OK,
        TOPIC_DENIED,
    ),
    # Tidelog gives any login an id (Kafka: IdempotentWrite on the cluster or Write on
    # some topic, else CLUSTER_AUTHORIZATION_FAILED); every produce is still checked.
    Row(
        "InitProducerId",
        22,
        0,
        {"transactional_id": None, "transaction_timeout_ms": 60000},
        lambda a: a.error_code,
        OK,
        OK,
    ),
    # Transactions (docs/transactions.md): alice (Write on transactional id tx-a, which
    # implies Describe) passes the ACLs and meets the coordinator (no such id yet),
    # bob is refused first.
    Row(
        "AddPartitionsToTxn",
        24,
        1,
        ADD_PARTITIONS,
        _added,
        NO_PRODUCER_ID_MAPPING,
        TXN_ID_DENIED,
    ),
    Row(  # the id allowed, the topic not (admin: a super user, may)
        "AddPartitionsToTxn(payments)",
        24,
        1,
        {**ADD_PARTITIONS, "v3_and_below_topics": [{"name": "payments", "partitions": [0]}]},
        _added,
        NO_PRODUCER_ID_MAPPING,
        TOPIC_DENIED,
        users=("admin", "alice"),
    ),
    Row(
        "InitProducerId(transactional)",
        22,
        1,
        {"transactional_id": "tx-a", "transaction_timeout_ms": 60000},
        lambda a: a.error_code,
        OK,
        TXN_ID_DENIED,
    ),
    Row(
        "FindCoordinator(transaction)",
        10,
        1,
        {"key": "tx-a", "key_type": 1},
        lambda a: a.error_code,
        OK,
        TXN_ID_DENIED,
    ),
    Row(
        "AddOffsetsToTxn",
        25,
        1,
        {"transactional_id": "tx-a", "producer_id": 0, "producer_epoch": 0, "group_id": "billing"},
        lambda a: a.error_code,
        NO_PRODUCER_ID_MAPPING,
        GROUP_DENIED,
    ),
    Row(
        "EndTxn",
        26,
        1,
        {"transactional_id": "tx-a", "producer_id": 0, "producer_epoch": 0, "committed": True},
        lambda a: a.error_code,
        NO_PRODUCER_ID_MAPPING,
        TXN_ID_DENIED,
    ),
    Row(
        "TxnOffsetCommit",
        28,
        1,
        {
            "transactional_id": "tx-a",
            "group_id": "billing",
            "producer_id": 0,
            "producer_epoch": 0,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
        lambda a: _part(a, "topics"),
        NO_PRODUCER_ID_MAPPING,
        GROUP_DENIED,
    ),
    Row(
        "WriteTxnMarkers",
        27,
        0,
        {
            "markers": [
                {
                    "producer_id": 0,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "orders", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
        lambda a: a.markers[0].topics[0].partitions[0].error_code,
        OK,
        CLUSTER_DENIED,
        users=("admin", "alice"),
    ),
    Row(
        "DescribeProducers",
        61,
        0,
        {"topics": [{"name": "orders", "partition_indexes": [0]}]},
        lambda a: _part(a, "topics"),
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DescribeTransactions",
        65,
        0,
        {"transactional_ids": ["tx-a"]},
        lambda a: a.transaction_states[0].error_code,
        TXN_ID_NOT_FOUND,
        TXN_ID_DENIED,
    ),
    Row(
        "ListTransactions",
        66,
        0,
        {"state_filters": [], "producer_id_filters": []},
        lambda a: a.error_code,
        OK,
        OK,
    ),
    Row(
        "DescribeConfigs",
        32,
        1,
        {
            "resources": [_topic_config("orders", configuration_keys=None)],
            "include_synonyms": False,
        },
        lambda a: a.results[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DescribeConfigs(broker)",
        32,
        1,
        {
            "resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
            "include_synonyms": False,
        },
        lambda a: a.results[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "AlterConfigs",
        33,
        0,
        {
            "resources": [
                _topic_config("orders", configs=[{"name": "retention.ms", "value": "60000"}])
            ],
            "validate_only": False,
        },
        lambda a: a.responses[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DeleteGroups",
        42,
        0,
        {"groups_names": ["billing"]},
        lambda a: a.results[0].error_code,
        OK,
        GROUP_DENIED,
    ),
    Row(
        "IncrementalAlterConfigs",
        44,
        0,
        {
            "resources": [
                _topic_config(
                    "orders",
                    configs=[{"name": "retention.ms", "config_operation": 0, "value": "60000"}],
                )
            ],
            "validate_only": False,
        },
        lambda a: a.responses[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "OffsetDelete",
        47,
        0,
        {
            "group_id": "billing",
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0}]}],
        },
        lambda a: a.error_code or _part(a, "topics"),
        OK,
        GROUP_DENIED,
    ),
    Row(
        "DescribeCluster",
        60,
        0,
        {"include_cluster_authorized_operations": False},
        lambda a: a.error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "CreateAcls",
        30,
        1,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "logs",
                    "resource_pattern_type": 3,
                    "principal": "User:carol",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
        lambda a: a.results[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "AlterConfigs(broker)",
        33,
        0,
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "1",
                    "configs": [{"name": "log.retention.ms", "value": "1"}],
                }
            ],
            "validate_only": False,
        },
        lambda a: a.responses[0].error_code,
        ERRORS_BY_NAME["INVALID_REQUEST"].code,  # no broker key is dynamic here
        CLUSTER_DENIED,
    ),
    Row(
        "CreatePartitions",
        37,
        3,
        {
            "topics": [{"name": "orders", "count": 2, "assignments": None}],
            "timeout_ms": 5000,
            "validate_only": False,
        },
        lambda a: a.results[0].error_code,
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DescribeLogDirs",
        35,
        4,
        {"topics": None},
        lambda a: a.error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "ElectLeaders",
        43,
        2,
        {
            "election_type": 0,
            "topic_partitions": [{"topic": "orders", "partitions": [0]}],
            "timeout_ms": 5000,
        },
        lambda a: a.error_code or _part(a, "replica_election_results", "partition_result"),
        ERRORS_BY_NAME["ELECTION_NOT_NEEDED"].code,  # the only replica leads already
        CLUSTER_DENIED,
    ),
    Row(
        "ListPartitionReassignments",
        46,
        0,
        {"timeout_ms": 5000, "topics": None},
        lambda a: a.error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "AlterPartitionReassignments",
        45,
        0,
        {
            "timeout_ms": 5000,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "replicas": [1]}]}],
        },
        lambda a: a.error_code or _part(a, "responses"),
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "OffsetForLeaderEpoch",
        23,
        4,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [{"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0}],
                }
            ],
        },
        lambda a: _part(a, "topics"),
        OK,
        TOPIC_DENIED,
    ),
    Row(
        "DescribeClientQuotas",
        48,
        1,
        {"components": [], "strict": False},
        lambda a: a.error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "AlterClientQuotas",
        49,
        1,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "client-id", "entity_name": "matrix"}],
                    "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}],
                }
            ],
            "validate_only": False,
        },
        lambda a: a.entries[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "DescribeUserScramCredentials",
        50,
        0,
        {"users": [{"name": "alice"}]},
        lambda a: a.error_code or a.results[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row(
        "AlterUserScramCredentials",
        51,
        0,
        {
            "deletions": [],
            "upsertions": [
                {
                    "name": "carol",
                    "mechanism": 1,
                    "iterations": 4096,
                    "salt": b"s" * 16,
                    "salted_password": b"p" * 32,
                }
            ],
        },
        lambda a: a.results[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
    Row("DescribeAcls", 29, 1, _acl_filter(), lambda a: a.error_code, OK, CLUSTER_DENIED),
    Row(
        "DeleteAcls",
        31,
        1,
        {"filters": [_acl_filter(principal_filter="User:nobody")]},
        lambda a: a.filter_results[0].error_code,
        OK,
        CLUSTER_DENIED,
    ),
]


# Group APIs that also check each topic (Read, or Describe for OffsetFetch).
TOPIC_ALSO = frozenset({"OffsetCommit", "OffsetFetch", "OffsetDelete"})
ROWS += _topic_rows()


async def _prepare(handle: Any) -> None:
    """As admin: topic orders with one record, group billing with a committed offset."""
    address = f"{handle.host}:{handle.port}"
    async with open_client(address, security=user("admin", "pw-admin", "PLAIN")) as admin:
        await admin.create_topic("orders")
        await admin.create_topic("payments")
        await admin.produce("orders", 0, _records())
        await admin.call(commit_offsets("billing", {("orders", 0): 1, ("payments", 0): 1}))


async def _login(handle: Any, name: str) -> KafkaWire:
    wire = KafkaWire(await trio.open_tcp_stream(handle.host, handle.port))
    try:
        answer = await wire.login(name, f"pw-{name}")
        assert answer.error_code == OK, answer.error_message
    except BaseException:
        await wire.stream.aclose()
        raise
    return wire


def _users(data: Path) -> None:
    for name in ("admin", "alice", "bob"):
        add_user(data, name, f"pw-{name}")
    grant(data, *ALICE_ACLS)


@pytest.mark.parametrize("row", ROWS, ids=[row.api for row in ROWS])
async def test_kafka_api_allowed_and_denied(secured_broker: Any, tmp_path: Path, row: Row) -> None:
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        await _prepare(handle)
        granted, refused = row.users
        async with await _login(handle, refused) as wire:
            denied = await wire.ask(row.key, row.version, **row.fields)
        assert row.code(denied) == row.denied, denied
        async with await _login(handle, granted) as wire:
            allowed = await wire.ask(row.key, row.version, **row.fields)
        assert row.code(allowed) == row.allowed, allowed


def test_the_matrix_covers_every_kafka_api() -> None:
    served = {kp_class(key, True).__name__.removesuffix("Request") for key in KAFKA_HANDLERS}
    rows = {row.api.split("(")[0] for row in ROWS} | {
        "SaslHandshake",
        "SaslAuthenticate",
        "ListGroups",
    }
    assert served <= rows, served - rows


async def test_kafka_login_wrong_password_and_unknown_mechanism(
    secured_broker: Any, tmp_path: Path
) -> None:
    """SaslHandshake/SaslAuthenticate: the right password logs in (every row above),
    a wrong one gets SASL_AUTHENTICATION_FAILED, a mechanism not enabled its code."""
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        wire = KafkaWire(await trio.open_tcp_stream(handle.host, handle.port))
        shake = await wire.ask(17, 1, mechanism="SCRAM-SHA-512")
        assert (shake.error_code, shake.mechanisms) == (
            ERRORS_BY_NAME["UNSUPPORTED_SASL_MECHANISM"].code,
            ["PLAIN"],
        )
        async with wire:
            answer = await wire.login("bob", "wrong")
        assert answer.error_code == SASL_FAILED


async def test_metadata_for_all_topics_hides_what_bob_may_not_describe(
    secured_broker: Any, tmp_path: Path
) -> None:
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        await _prepare(handle)
        async with await _login(handle, "bob") as bob, await _login(handle, "alice") as alice:
            await _everything_and_groups(bob, alice)


async def _everything_and_groups(bob: KafkaWire, alice: KafkaWire) -> None:
    everything = {"topics": None, "allow_auto_topic_creation": False}
    assert (await bob.ask(3, 4, **everything)).topics == []
    assert [t.name for t in (await alice.ask(3, 4, **everything)).topics] == ["orders"]
    groups = await bob.ask(16, 1)
    assert (groups.error_code, groups.groups) == (OK, [])  # ListGroups: filtered
    listed = await alice.ask(16, 1)
    assert [g.group_id for g in listed.groups] == ["billing"]
    # DescribeGroups answers per group: the one alice may not describe fails alone
    described = await alice.ask(15, 1, groups=["billing", "payroll"])
    codes = [(g.group_id, g.error_code) for g in described.groups]
    assert codes == [("billing", OK), ("payroll", GROUP_DENIED)]
    assert described.groups[0].group_state == "Empty"


@pytest.mark.parametrize(
    ("key", "version", "fields"),
    [
        (10, 1, {"key": "billing", "key_type": 0}),  # FindCoordinator
        (60, 0, {"include_cluster_authorized_operations": False}),  # DescribeCluster
        (47, 0, {"group_id": "billing", "topics": []}),  # OffsetDelete
    ],
    ids=["FindCoordinator", "DescribeCluster", "OffsetDelete"],
)
async def test_apis_without_a_native_handler_are_refused_before_login(
    secured_broker: Any, tmp_path: Path, key: int, version: int, fields: dict[str, Any]
) -> None:
    """The adapters that check the ACLs themselves keep the login gate: refused with
    SASL_AUTHENTICATION_FAILED, then the broker closes the connection."""
    _users(tmp_path / "data")
    async with (
        secured_broker(*SETTINGS) as handle,
        KafkaWire(await trio.open_tcp_stream(handle.host, handle.port)) as wire,
    ):
        answer = await wire.ask(key, version, **fields)
        assert answer.error_code == SASL_FAILED
        with trio.fail_after(5):
            assert await wire.stream.receive_some(100) == b""


async def test_describe_cluster_reports_the_principals_own_cluster_operations(
    secured_broker: Any, tmp_path: Path
) -> None:
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        async with await _login(handle, "alice") as alice:
            answer = await alice.ask(60, 0, include_cluster_authorized_operations=True)
        # Alter (7) grants Describe (8); AlterConfigs (11) grants DescribeConfigs (10)
        assert answer.error_code == OK
        assert set(answer.authorized_operations) == {7, 8, 10, 11}
        async with await _login(handle, "admin") as admin:
            answer = await admin.ask(60, 0, include_cluster_authorized_operations=True)
        assert set(answer.authorized_operations) == {5, 7, 8, 9, 10, 11, 12}
