"""Browser tests of the web console: headless Chromium (Debian's `chromium` and
`chromium-driver`) driven by Selenium, against one real broker for the session.

They run under `make browser` (which installs those and the `browser` extra), not
`make test`: collected only when asked for, by `-m browser` or a path inside
tests/browser. The broker holds 10,000 topics of 2 partitions (20,000 partitions),
created once at the start, as the scale the console must stay usable at.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.security.conftest import add_user
from tests.conftest import BrokerProcess, start_broker
from tidelog import Client

BROWSER_DIR = Path(__file__).resolve().parent
ADMIN, ADMIN_PASSWORD = "admin", "Adm1n-browser-test-only"
NOBODY, NOBODY_PASSWORD = "bob", "B0b-browser-no-acls"
BULK_TOPICS = int(os.environ.get("TIDELOG_BROWSER_TOPICS", "10000"))
BULK_PARTITIONS = 2
# Where the screenshots of docs/console.md go (`make browser SCREENSHOTS=docs/console`);
# unset or empty: none taken.
SHOTS_ENV = "TIDELOG_CONSOLE_SCREENSHOTS"


def _requested(config: pytest.Config) -> bool:
    if re.search(r"(?<!not )\bbrowser\b", config.getoption("markexpr") or ""):
        return True
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == BROWSER_DIR or BROWSER_DIR in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name.startswith("test_") and not _requested(config):
        return True
    return None


def _bulk_topics(broker: BrokerProcess) -> None:
    """10,000 topics, pipelined 200 at a time (one request each, as a client would)."""
    with Client(broker.bootstrap, client_id="bulk") as client:
        for start in range(0, BULK_TOPICS, 200):
            for i in range(start, min(start + 200, BULK_TOPICS)):
                client.send(
                    "create_topic",
                    {
                        "topic": f"bulk-{i:05d}",
                        "validate_only": False,
                        "partitions": BULK_PARTITIONS,
                        "configs": {},
                    },
                )
            for _ in range(start, min(start + 200, BULK_TOPICS)):
                client.receive()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("console") / "data"
    data.mkdir()
    add_user(data, ADMIN, ADMIN_PASSWORD)
    add_user(data, NOBODY, NOBODY_PASSWORD)
    process = start_broker(
        data,
        "authorizer=on",
        f"super.users=User:{ADMIN};User:ANONYMOUS",
        "log.cleaner.backoff.ms=500",
    )
    try:
        _bulk_topics(process)
        yield process
    finally:
        process.kill()  # a graceful close of 20,000 partitions takes minutes; a tmp dir


def _chrome() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture
def chrome() -> Iterator[Any]:
    driver = _chrome()
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots() -> Path | None:
    target = os.environ.get(SHOTS_ENV)
    if not target:
        return None
    path = Path(target)
    path.mkdir(parents=True, exist_ok=True)
    return path
