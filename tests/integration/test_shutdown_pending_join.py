"""Issue 38 #10: SIGTERM does not wait the whole drain for a JoinGroup whose client left.

Member A is stable in a group; member B joins, which starts a rebalance that waits
for A to rejoin (A's rebalance timeout: 5 minutes), so B's JoinGroup is pending. B
closes its connection. The graceful shutdown waits up to 30 s (SHUTDOWN_DRAIN_S) for
requests in flight; a pending join nobody will read must not count, so the broker
exits well before that. The real `tidelog serve`; the bound is far from both the
drain and the measured value (docs/groups.md).
"""

from __future__ import annotations

import signal
import time
from typing import Any

from broker.server import SHUTDOWN_DRAIN_S
from protocol.groups_schema import JOIN_GROUP, SYNC_GROUP
from tests.conftest import BrokerFactory
from tidelog.client import Client

GROUP = "billing"
# Far below the 30 s drain, far above the ~1 s it takes once the join is let go.
EXIT_BOUND_S = 15.0


def _join(member_id: str) -> dict[str, Any]:
    return {
        "group": GROUP,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "session_timeout_ms": 60_000,
        "rebalance_timeout_ms": 300_000,
        "client_id": "test",
    }


def _join_stable(client: Client) -> str:
    """Join (twice: the first answers MEMBER_ID_REQUIRED) and sync as the only member."""
    first = client.request(JOIN_GROUP, _join(""))
    joined = client.request(JOIN_GROUP, _join(first["member_id"]))
    assert joined["error"] is None, joined
    member = joined["member_id"]
    synced = client.request(
        SYNC_GROUP,
        {
            "group": GROUP,
            "member_id": member,
            "generation": joined["generation"],
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol": "range",
            "assignments": [{"member_id": member, "assignment": b""}],
        },
    )
    assert synced["error"] is None, synced
    return str(member)


def _wait_for_state(client: Client, state: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        (group,) = client.request("describe_groups", {"groups": [GROUP]})["groups"]
        if group["state"] == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"group {GROUP} never reached {state}: {group}")


def test_sigterm_does_not_wait_for_a_pending_join_whose_client_left(
    broker_factory: BrokerFactory,
) -> None:
    assert SHUTDOWN_DRAIN_S >= 2 * EXIT_BOUND_S
    broker = broker_factory("group.initial.rebalance.delay.ms=0")
    with Client(broker.bootstrap) as a:
        _join_stable(a)
        b = Client(broker.bootstrap)
        b.connect()
        first = b.request(JOIN_GROUP, _join(""))
        b.send(JOIN_GROUP, _join(first["member_id"]))  # pending: A has not rejoined
        _wait_for_state(a, "PreparingRebalance")
        b.close()
        a.close()
        started = time.monotonic()
        broker.send_signal(signal.SIGTERM)
        broker.proc.wait(timeout=SHUTDOWN_DRAIN_S + 30)
        took = time.monotonic() - started
    print(f"exit {took:.2f} s after SIGTERM")
    assert broker.proc.returncode == 0, broker.output()
    assert took < EXIT_BOUND_S, broker.output()
