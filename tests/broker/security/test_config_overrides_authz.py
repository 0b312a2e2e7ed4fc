"""Issue 38 #7: a topic's config overrides need DescribeConfigs at every door.

DescribeConfigs refused a principal with only Read on a topic, while msgpack
`metadata` returned the same overrides in each topic's `configs` and
`explain_retention` its retention settings. Now `metadata` leaves `configs` empty
without DescribeConfigs, and `explain_retention` (every answer carries the settings)
is TOPIC_AUTHORIZATION_FAILED without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocol.errors import TopicAuthorizationFailed
from protocol.retention_schema import explain_retention
from tests.broker.security.conftest import add_user
from tests.broker.security.test_sasl_acl_inprocess import AUTHZ, address, grant, user
from tidelog.aio import open_client

OVERRIDES = {"retention.ms": "123456789", "segment.bytes": "1048576"}


async def test_read_alone_does_not_reveal_config_overrides(
    secured_broker: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    add_user(data, "alice", "pw-alice")
    add_user(data, "carol", "pw-carol")
    grant(data, "Allow User:alice Read Topic Literal orders")
    grant(data, "Allow User:carol Read Topic Literal orders")
    grant(data, "Allow User:carol DescribeConfigs Topic Literal orders")
    async with secured_broker(*AUTHZ) as handle:
        async with open_client(address(handle), security=user("admin", "pw-admin")) as admin:
            await admin.create_topic("orders", 1, OVERRIDES)
        async with open_client(address(handle), security=user("alice", "pw-alice")) as alice:
            (named,) = await alice.metadata(["orders"])
            (listed,) = await alice.metadata()
            assert named["partitions"] and named["configs"] == {} and listed["configs"] == {}
            with pytest.raises(TopicAuthorizationFailed, match="DescribeConfigs"):
                await alice.describe_configs("orders")
            with pytest.raises(TopicAuthorizationFailed, match="DescribeConfigs"):
                await alice.call(explain_retention("orders"))
        async with open_client(address(handle), security=user("carol", "pw-carol")) as carol:
            (named,) = await carol.metadata(["orders"])
            assert named["configs"] == OVERRIDES
            (partition,) = await carol.call(explain_retention("orders"))
            assert partition["retention_ms"] == 123456789
