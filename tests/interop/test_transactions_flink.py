"""Flink 2.0's KafkaSink with DeliveryGuarantee.EXACTLY_ONCE in a local MiniCluster, on
Apache Kafka and on Tidelog (issue 36's acceptance, "if it fits").

`FlinkEosJob` (interop/flink) writes COUNT records through a map that fails the job once
halfway (20 records after a checkpoint barrier); the job restarts from its last
checkpoint. The sink's transaction of the failed attempt is aborted, so a read_committed
reader sees each record exactly once, while a read_uncommitted reader also sees the
aborted attempt's records again (the failure was real, and mid-stream).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from interop.ecosystem import kafka_io
from interop.ecosystem.toolchains import flink_classpath
from interop.jvm import TOOLS_LOG4J, java_binary
from interop.targets import Target

pytestmark = pytest.mark.interop

FLINK_MAIN = "dev.tidelog.interop.FlinkEosJob"
COUNT = 1000  # at the job's 200 records/s: ~5 s, a checkpoint every 0.5 s
JOB_TIMEOUT_S = 240.0
FLINK_HEAP_MB = 512


def _read(bootstrap: str, topic: str, isolation: str) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": "flink-reader-unused",
            "enable.auto.commit": False, "isolation.level": isolation,
        }
    )  # fmt: skip
    try:
        tp = TopicPartition(topic, 0)
        end = consumer.get_watermark_offsets(tp, timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + 60
        while consumer.position([tp])[0].offset < end and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            value = msg.value()
            assert isinstance(value, bytes)
            values.append(value.decode())
        return values
    finally:
        consumer.close()


def _run_job(bootstrap: str, topic: str, prefix: str) -> str:
    argv = [
        java_binary(), f"-Xmx{FLINK_HEAP_MB}m", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp", flink_classpath(), FLINK_MAIN, bootstrap, topic, prefix, str(COUNT),
    ]  # fmt: skip
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        raise AssertionError(
            f"FlinkEosJob exited {result.returncode}:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-6000:]}"
        )
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target_name", ["kafka", "tidelog"])
def test_flink_kafka_sink_exactly_once_through_a_failure(
    kafka: Target, tidelog: Target, unique: Callable[[str], str], target_name: str
) -> None:
    bootstrap = kafka.bootstrap if target_name == "kafka" else tidelog.bootstrap
    topic = unique("flink-eos")
    kafka_io.create_topic(bootstrap, topic, 1)
    assert _run_job(bootstrap, topic, unique("flink-eos-tx")) == "DONE failed=true"
    committed = _read(bootstrap, topic, "read_committed")
    assert Counter(committed) == Counter(f"rec-{i}" for i in range(COUNT)), (
        f"{len(committed)} records, {len(set(committed))} distinct"
    )
    uncommitted = _read(bootstrap, topic, "read_uncommitted")
    assert set(uncommitted) == set(committed)
    assert len(uncommitted) > len(committed), "no aborted attempt: the failure did not happen"
