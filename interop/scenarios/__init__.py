"""Client scenarios: plain functions of a bootstrap address returning what a client saw.

Every client module exposes the same four functions so a test or a differential run can
loop over clients and targets alike:

- `produce_consume(bootstrap, topic, codec)`: create a 2-partition topic, produce
  `SAMPLES` with `codec` to explicit partitions, read them back by assignment;
- `group_consume(bootstrap, topic, group)`: produce, consume by group subscription,
  commit, and read the committed offsets back;
- `offsets(bootstrap, topic)`: earliest / latest offsets and offsets for timestamps;
- `admin_topics(bootstrap, topic)`: create (twice), describe, alter, delete a topic.

Each returns plain data (dicts, lists, tuples, bytes) built by `interop.observed`.
"""

from __future__ import annotations

from types import ModuleType

from interop.scenarios import aiokafka_client, confluent_client, kafka_python_client, kcat_client
from interop.scenarios.names import SCENARIO_NAMES

__all__ = ["CLIENTS", "SCENARIO_NAMES"]

CLIENTS: dict[str, ModuleType] = {
    "kafka-python": kafka_python_client,
    "aiokafka": aiokafka_client,
    "confluent-kafka": confluent_client,
    "kcat": kcat_client,
}
