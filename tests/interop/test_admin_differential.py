"""The admin scenarios side by side: Apache Kafka and Tidelog, the same client code, the
same observations; and Kafka still answers what tests/interop/admin_expected.py recorded
(which tests/integration/test_kafka_admin.py holds Tidelog to in CI)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from interop.admin_scenarios import ADMIN_DETAILS
from interop.targets import Target
from tests.conftest import BrokerFactory
from tests.interop.admin_expected import ADMIN_DETAILS as RECORDED

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("client", sorted(ADMIN_DETAILS))
def test_tidelog_and_kafka_admin_clients_see_the_same(
    kafka: Target, broker_factory: BrokerFactory, unique: Callable[[str], str], client: str
) -> None:
    on_kafka = ADMIN_DETAILS[client](kafka.bootstrap, unique(f"adm-{client}"))
    tidelog = broker_factory()
    on_tidelog = ADMIN_DETAILS[client](tidelog.bootstrap, unique(f"adm-{client}"))
    assert on_tidelog == on_kafka
    assert on_kafka == RECORDED[client]
