"""Fixtures of the console's HTTP tests: a real `tidelog serve` and a cookie-keeping client."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import BrokerFactory, BrokerProcess
from tests.console.web import Browser

ADMIN = "admin"
ADMIN_PASSWORD = "Adm1n-console-test-only"
NOBODY = "bob"
NOBODY_PASSWORD = "B0b-has-no-acls-here"


def browser_for(broker: BrokerProcess) -> Browser:
    return Browser("127.0.0.1", broker.metrics_port)


@pytest.fixture
def open_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker without authentication: the console acts as User:ANONYMOUS, no login."""
    return broker_factory()


@pytest.fixture
def make_browser() -> Callable[[BrokerProcess], Browser]:
    return browser_for
