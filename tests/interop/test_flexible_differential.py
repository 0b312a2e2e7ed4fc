"""Issue 36's flexible versions side by side: the same wire requests (kafka-python's
classes) to Apache Kafka 4.4 and to Tidelog, the same observations (topic ids by id in
Metadata, Produce, Fetch and DeleteTopics, Fetch's diverging epoch, ListOffsets v9,
FindCoordinator v4, OffsetFetch v8), and what ApiVersions advertises for the APIs
Tidelog serves reaching Kafka's newest versions."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from interop.admin_requests import WireClient
from interop.flexible_requests import flexible_observations
from interop.targets import Target

pytestmark = pytest.mark.interop

# The APIs whose newest version Tidelog serves as Kafka 4.4 does (others stop earlier on
# purpose: docs/kafka.md "APIs and versions"; DeleteGroups' v3 is newer than the schemas
# kafka-python bundles, which our tables come from).
SAME_MAX = (0, 1, 3, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 32, 33)


def _ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    client = WireClient(bootstrap)
    try:
        answer = client.call(
            ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
        )
    finally:
        client.close()
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_flexible_requests_are_answered_as_kafka_answers(
    kafka: Target, tidelog: Target, unique: Callable[[str], str]
) -> None:
    on_kafka = flexible_observations(kafka.bootstrap, unique("flex"))
    on_tidelog = flexible_observations(tidelog.bootstrap, unique("flex"))
    assert on_tidelog == on_kafka


def test_newest_versions_are_kafkas(kafka: Target, tidelog: Target) -> None:
    theirs, ours = _ranges(kafka.bootstrap), _ranges(tidelog.bootstrap)
    assert {k: ours[k][1] for k in SAME_MAX} == {k: theirs[k][1] for k in SAME_MAX}
