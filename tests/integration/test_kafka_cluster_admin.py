"""The cluster-administration APIs end to end: the real broker process and admin
clients nobody here wrote (confluent-kafka's AdminClient over librdkafka,
kafka-python's KafkaAdminClient): partitions added and served at once, log dirs,
leader elections, reassignments, max-timestamp offsets and the features."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest

from tests.conftest import BrokerProcess, start_broker
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

# Offsets from now: records older than retention.ms (7 days) may be deleted at once.
STAMP_OFFSETS_MS = (-500, -100, -900)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("cluster-admin") / "data", "num.partitions=1")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> confluent_kafka.admin.AdminClient:
    return confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker: BrokerProcess) -> Iterator[Any]:
    client = kafka.admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="kp")
    yield client
    client.close()


def _create(admin: confluent_kafka.admin.AdminClient, name: str, partitions: int = 1) -> None:
    futures = admin.create_topics([confluent_kafka.admin.NewTopic(name, partitions, 1)])
    futures[name].result(CLIENT_TIMEOUT_S)


def _grow(admin: confluent_kafka.admin.AdminClient, name: str, count: int, **options: Any) -> None:
    futures = admin.create_partitions([confluent_kafka.admin.NewPartitions(name, count)], **options)
    futures[name].result(CLIENT_TIMEOUT_S)


def _partitions(admin: confluent_kafka.admin.AdminClient, name: str) -> int:
    return len(admin.list_topics(name, timeout=CLIENT_TIMEOUT_S).topics[name].partitions)


def test_create_partitions_serves_the_new_partition_at_once(
    broker: BrokerProcess, admin: confluent_kafka.admin.AdminClient
) -> None:
    _create(admin, "grow")
    _grow(admin, "grow", 3, validate_only=True)
    assert _partitions(admin, "grow") == 1
    _grow(admin, "grow", 3)
    assert _partitions(admin, "grow") == 3
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("grow", b"into-two", key=b"k", partition=2)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g-grow", "enable.auto.commit": False}
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition("grow", 2, 0)])
        message = consumer.poll(CLIENT_TIMEOUT_S)
        assert message is not None and message.error() is None
        assert (message.partition(), message.key(), message.value()) == (2, b"k", b"into-two")
    finally:
        consumer.close()


def test_create_partitions_refuses_a_decrease(admin: confluent_kafka.admin.AdminClient) -> None:
    _create(admin, "shrink", 2)
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        _grow(admin, "shrink", 1)
    error = refused.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_PARTITIONS
    assert "1 would not be an increase" in error.str()
    assert _partitions(admin, "shrink") == 2


def test_describe_log_dirs_sizes(
    broker: BrokerProcess, admin: confluent_kafka.admin.AdminClient, kp_admin: Any
) -> None:
    _create(admin, "sized")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("sized", b"x" * 500, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    [answer] = kp_admin.describe_log_dirs()
    [log_dir] = answer["log_dirs"]
    assert (log_dir["error_code"], log_dir["log_dir"]) == (0, str(broker.data_dir.absolute()))
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert sizes[("sized", 0)] > 500
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0


def test_elect_leaders_and_reassignments_have_nothing_to_do(
    admin: confluent_kafka.admin.AdminClient, kp_admin: Any
) -> None:
    _create(admin, "led")
    assert kp_admin.list_partition_reassignments() == {}
    answer = kp_admin.elect_leaders(election_type=0, topic_partitions={"led": [0]},
                                    raise_errors=False)  # fmt: skip
    [result] = answer.replica_election_results[0].partition_result
    assert (result.partition_id, result.error_code) == (0, 84)  # ELECTION_NOT_NEEDED


def test_list_offsets_max_timestamp(
    broker: BrokerProcess, admin: confluent_kafka.admin.AdminClient
) -> None:
    _create(admin, "stamped")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    stamps = [int(time.time() * 1000) + offset for offset in STAMP_OFFSETS_MS]
    for timestamp in stamps:
        producer.produce("stamped", b"v", partition=0, timestamp=timestamp)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    partition = confluent_kafka.TopicPartition("stamped", 0)
    futures = admin.list_offsets({partition: confluent_kafka.admin.OffsetSpec.max_timestamp()})
    found = futures[partition].result(CLIENT_TIMEOUT_S)
    assert (found.offset, found.timestamp) == (1, max(stamps))


def test_features_name_metadata_version(kp_admin: Any) -> None:
    features = kp_admin.describe_features()
    assert features["metadata.version"]["supported"] == (7, 33)
    assert features["metadata.version"]["finalized"] == (33, 33)


def test_broker_configs_name_the_inter_broker_protocol(
    admin: confluent_kafka.admin.AdminClient,
) -> None:
    resource = confluent_kafka.admin.ConfigResource("BROKER", "1")
    configs = admin.describe_configs([resource])[resource].result(CLIENT_TIMEOUT_S)
    entry = configs["inter.broker.protocol.version"]
    assert (entry.value, entry.source) == (
        "4.4-IV2",
        confluent_kafka.admin.ConfigSource.DEFAULT_CONFIG.value,
    )
