"""Flexible-version requests (issue 36) straight on the wire, for comparing Apache Kafka
with Tidelog: topic ids (CreateTopics v7, Metadata v10/v12, Produce v13, Fetch v13 and
its diverging epoch, DeleteTopics v6), ListOffsets v9's special timestamps,
FindCoordinator v4's batched keys and OffsetFetch v8's batched groups.

    seen = flexible_observations(bootstrap, prefix)   # {case: comparable values}

Requests are kafka-python's protocol classes (a codec nobody here wrote) over
interop.admin_requests.WireClient; a topic id differs between brokers, so the
observations say only how ids relate (the same one back, zero or not).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, DeleteTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from interop.admin_requests import WireClient
from interop.observed import wait_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

ZERO = uuid.UUID(int=0)
STRANGER = uuid.UUID("00000000-0000-4000-8000-0000000000aa")


def _batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))


class _Run:
    """One broker's run of the cases, sharing the created topic's id."""

    def __init__(self, client: WireClient, prefix: str) -> None:
        self.client, self.topic = client, f"{prefix}-ids"
        self.topic_id = ZERO

    def create(self) -> list[Any]:
        R = CreateTopicsRequest[7]
        topic = R.CreatableTopic(
            name=self.topic, num_partitions=2, replication_factor=1, assignments=[], configs=[]
        )
        answer = self.client.call(R(topics=[topic], timeout_ms=10_000))
        [topic] = answer.topics
        self.topic_id = _as_uuid(topic.topic_id)
        return [topic.error_code, topic.num_partitions, topic.replication_factor,
                self.topic_id != ZERO]  # fmt: skip

    def metadata(self, version: int, by_id: bool, topic_id: uuid.UUID | None = None) -> list[Any]:
        R = MetadataRequest[version]
        wanted = topic_id or self.topic_id
        topic = (
            R.MetadataRequestTopic(topic_id=wanted, name=None)
            if by_id
            else R.MetadataRequestTopic(topic_id=ZERO, name=self.topic)
        )
        body = {"topics": [topic], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}  # fmt: skip
        answer = wait_until(
            lambda: self.client.call(R(**body)),
            lambda a: a.topics and (topic_id is not None or a.topics[0].error_code == 0),
        )
        return [
            (t.error_code, t.name == self.topic, _as_uuid(t.topic_id) == self.topic_id,
             len(t.partitions))
            for t in answer.topics
        ]  # fmt: skip

    def produce(self, topic_id: uuid.UUID | None = None) -> list[Any]:
        R = ProduceRequest[13]
        part = R.TopicProduceData.PartitionProduceData(index=0, records=_batch(b"by id"))
        data = R.TopicProduceData(topic_id=topic_id or self.topic_id, partition_data=[part])
        answer = self.client.call(
            R(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[data])
        )
        return [
            (p.error_code, p.base_offset) for t in answer.responses for p in t.partition_responses
        ]

    def fetch(self, offset: int, last_epoch: int, topic_id: uuid.UUID | None = None) -> list[Any]:
        R = FetchRequest[13]
        part = R.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=last_epoch, log_start_offset=-1, partition_max_bytes=1 << 20,
        )  # fmt: skip
        topic = R.FetchTopic(topic_id=topic_id or self.topic_id, partitions=[part])
        answer = self.client.call(
            R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
              session_id=0, session_epoch=-1, topics=[topic], forgotten_topics_data=[],
              rack_id="")
        )  # fmt: skip
        out = []
        for t in answer.responses:
            for p in t.partitions:
                diverging = p.diverging_epoch
                out.append(
                    (
                        p.error_code,
                        p.high_watermark,
                        len(bytes(p.records or b"")) > 0,
                        None if diverging is None else (diverging.epoch, diverging.end_offset),
                    )
                )
        return out

    def list_offsets(self) -> list[Any]:
        R = ListOffsetsRequest[9]
        parts = [R.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=ts) for ts in (-4,)]  # fmt: skip
        tiered = [R.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=1, current_leader_epoch=-1, timestamp=-5)]  # fmt: skip
        answer = self.client.call(
            R(replica_id=-1, isolation_level=0,
              topics=[R.ListOffsetsTopic(name=self.topic, partitions=parts + tiered)])
        )  # fmt: skip
        # Kafka answers the partitions in the order their lookups complete, not request order.
        return sorted(
            (p.partition_index, p.error_code, p.offset, p.leader_epoch)
            for t in answer.topics
            for p in t.partitions
        )

    def find_coordinators(self) -> list[Any]:
        R = FindCoordinatorRequest[4]
        answer = wait_until(  # Kafka: COORDINATOR_NOT_AVAILABLE until its offsets topic is up
            lambda: self.client.call(R(key_type=0, coordinator_keys=["g1", "g2"])),
            lambda a: not any(c.error_code for c in a.coordinators),
        )
        return sorted((c.key, c.error_code, c.node_id >= 0) for c in answer.coordinators)

    def offset_fetch(self) -> list[Any]:
        R = OffsetFetchRequest[8]
        topic = R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
            name=self.topic, partition_indexes=[0]
        )
        groups = [R.OffsetFetchRequestGroup(group_id="nobody", topics=[topic])]
        answer = wait_until(  # Kafka: NOT_COORDINATOR while its coordinator loads
            lambda: self.client.call(R(groups=groups, require_stable=False)),
            lambda a: not any(g.error_code for g in a.groups),
        )
        return [
            (g.group_id, g.error_code,
             [(p.partition_index, p.committed_offset, p.error_code)
              for t in g.topics for p in t.partitions])
            for g in answer.groups
        ]  # fmt: skip

    def delete(self, topic_id: uuid.UUID | None = None) -> list[Any]:
        R = DeleteTopicsRequest[6]
        state = R.DeleteTopicState(name=None, topic_id=topic_id or self.topic_id)
        answer = self.client.call(R(topics=[state], timeout_ms=10_000))
        return [(r.error_code, r.name == self.topic if r.name else None) for r in answer.responses]


def _cases(run: _Run) -> dict[str, Callable[[], list[Any]]]:
    return {
        "create_v7": run.create,
        "metadata_v10_by_name": lambda: run.metadata(10, by_id=False),
        "metadata_v12_by_id": lambda: run.metadata(12, by_id=True),
        "metadata_v12_unknown_id": lambda: run.metadata(12, by_id=True, topic_id=STRANGER),
        "produce_v13_by_id": run.produce,
        "produce_v13_unknown_id": lambda: run.produce(STRANGER),
        "fetch_v13_by_id": lambda: run.fetch(0, -1),
        "fetch_v13_past_the_end_epoch_0": lambda: run.fetch(5, 0),
        "fetch_v13_unknown_id": lambda: run.fetch(0, -1, STRANGER),
        "list_offsets_v9_local_and_tiered": run.list_offsets,
        "find_coordinator_v4": run.find_coordinators,
        "offset_fetch_v8": run.offset_fetch,
        "delete_topics_v6_unknown_id": lambda: run.delete(STRANGER),
        "delete_topics_v6_by_id": run.delete,
    }


def flexible_observations(bootstrap: str, prefix: str) -> dict[str, list[Any]]:
    """Every case's observation, in order (later cases use the topic the first made)."""
    client = WireClient(bootstrap)
    try:
        run = _Run(client, prefix)
        return {name: case() for name, case in _cases(run).items()}
    finally:
        client.close()
