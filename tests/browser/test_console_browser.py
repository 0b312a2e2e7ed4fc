"""The console in headless Chromium: every page loads without a console error, each
action changes what a client then sees, logins and refusals, at 10,000 topics."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from protocol.batch import encode_batch, iter_records
from protocol.offsets_schema import commit_offsets, fetch_offsets
from tests.browser.conftest import (
    ADMIN,
    ADMIN_PASSWORD,
    BULK_TOPICS,
    NOBODY,
    NOBODY_PASSWORD,
)
from tests.conftest import BrokerProcess
from tidelog import Client

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.timeout(600)]


class Console:
    """One browser on the console: open pages, fill forms, check the browser's log."""

    def __init__(self, driver: Any, broker: BrokerProcess, shots: Path | None) -> None:
        self.driver = driver
        self.base = f"http://127.0.0.1:{broker.metrics_port}"
        self.shots = shots

    def open(self, path: str, shot: str = "") -> Any:
        self.driver.get(self.base + path)
        self.no_console_errors()
        if shot and self.shots is not None:
            self.driver.save_screenshot(str(self.shots / f"{shot}.png"))
        return self.driver

    def no_console_errors(self) -> None:
        errors = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

    def css(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def fill(
        self,
        form_action: str,
        values: dict[str, str],
        select: dict[str, str] | None = None,
        *,
        refused: bool = False,
    ) -> None:
        """Fill the form posting to `form_action` and submit it (as a person would); a
        refusal (`refused`) is answered with an error status, which the browser logs."""
        from selenium.webdriver.support.ui import Select

        form = self.css(f'form[action="{form_action}"]')
        for name, value in values.items():
            box = form.find_element("name", name)
            box.clear()
            box.send_keys(value)
        for name, value in (select or {}).items():
            Select(form.find_element("name", name)).select_by_value(value)
        form.find_element("css selector", "button[type=submit]").click()
        self.wait_for_new_page(form)
        if refused:
            self.driver.get_log("browser")  # the 401/403 status line, and nothing else
        else:
            self.no_console_errors()

    def wait_for_new_page(self, old: Any) -> None:
        """Until the page holding `old` is replaced (a click returns before it is)."""
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        def replaced(_: Any) -> bool:
            try:
                old.is_enabled()
            except WebDriverException:
                # Stale, or (when asked while the page is swapped) "Node with given id
                # does not belong to the document": either way the old page is gone.
                return True
            return False

        WebDriverWait(self.driver, 60).until(replaced)

    def login(self, user: str, password: str) -> None:
        self.open("/console/login")
        self.fill("/console/login", {"username": user, "password": password})

    def heading(self) -> str:
        return str(self.css("h1").text)

    def every_field_is_labelled(self) -> None:
        unlabelled = self.driver.execute_script(
            "return Array.from(document.querySelectorAll("
            "'input:not([type=hidden]), select, textarea')).filter("
            "e => !document.querySelector('label[for=\"' + e.id + '\"]')).map(e => e.name)"
        )
        assert unlabelled == []


@pytest.fixture
def admin(chrome: Any, broker: BrokerProcess, shots: Path | None) -> Console:
    console = Console(chrome, broker, shots)
    console.login(ADMIN, ADMIN_PASSWORD)
    return console


def _client(broker: BrokerProcess) -> Client:
    return Client(broker.bootstrap, client_id="browser-test")


def test_login_wrong_password_then_the_overview_with_live_charts(
    chrome: Any, broker: BrokerProcess, shots: Path | None
) -> None:
    console = Console(chrome, broker, shots)
    console.open("/console/topics")
    assert console.heading() == "Log in"
    console.every_field_is_labelled()
    console.fill("/console/login", {"username": ADMIN, "password": "wrong-password"}, refused=True)
    assert "Wrong user name or password" in console.css("[role=alert]").text
    console.fill("/console/login", {"username": ADMIN, "password": ADMIN_PASSWORD})
    assert console.heading() == "Overview", console.css("main").text
    assert int(console.css("#topic-count").text) >= BULK_TOPICS
    time.sleep(5)  # two or three ticks of the charts
    points = console.css("[data-series=connections] polyline").get_attribute("points")
    assert len(points.split()) >= 2
    console.open("/console/", shot="overview")
    console.every_field_is_labelled()


def test_keyboard_first_stop_is_the_skip_link_then_the_navigation(
    admin: Console,
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver = admin.open("/console/topics")
    ActionChains(driver).send_keys(Keys.TAB).perform()
    assert driver.switch_to.active_element.text == "Skip to content"
    ActionChains(driver).send_keys(Keys.TAB).perform()
    assert driver.switch_to.active_element.text == "Overview"
    driver = admin.open("/console/topics")
    ActionChains(driver).send_keys(Keys.TAB).send_keys(Keys.ENTER).perform()
    assert driver.execute_script("return location.hash") == "#main"
    ActionChains(driver).send_keys(Keys.TAB).perform()
    assert driver.switch_to.active_element.get_attribute("name") == "q"  # the search box


def test_topics_search_and_pages_at_10000_topics(admin: Console) -> None:
    driver = admin.open("/console/topics", shot="topics")
    total = driver.find_element("id", "topic-total").text
    assert int(total.split()[0].replace(",", "")) >= BULK_TOPICS
    assert len(admin.all("tbody tr")) == 50
    following = admin.css("a[rel=next]")
    following.click()
    admin.wait_for_new_page(following)
    assert "page 2 of" in admin.css(".pager").text
    first = admin.all("tbody tr td a")[0].text
    assert first.startswith("bulk-000")
    search = admin.css("#f-q")
    prefix = f"bulk-{BULK_TOPICS // 10 - 1:04d}"  # the last ten: bulk-09990 to bulk-09999
    search.send_keys(prefix)
    search.submit()
    admin.wait_for_new_page(search)
    names = [a.text for a in admin.all("tbody tr td a")]
    assert names == [f"{prefix}{i}" for i in range(10)]
    admin.every_field_is_labelled()


def test_create_alter_produce_browse_and_delete_a_topic(
    admin: Console, broker: BrokerProcess
) -> None:
    admin.open("/console/topics")
    admin.fill(
        "/console/topics/create",
        {"topic": "web-orders", "partitions": "2", "configs": "retention.ms=3600000"},
    )
    assert admin.heading() == "Topic web-orders"
    admin.fill("/console/topic/web-orders/configs", {"set": "retention.ms=5400000", "delete": ""})
    assert "configs changed" in admin.css("[role=status]").text
    admin.open("/console/topic/web-orders", shot="topic")
    with _client(broker) as client:
        assert client.describe_configs("web-orders")["retention.ms"]["value"] == 5400000
        assert len(client.metadata(["web-orders"])[0]["partitions"]) == 2
    before = int(time.time() * 1000)
    admin.open("/console/topic/web-orders/partition/0/records")
    admin.fill(
        "/console/topic/web-orders/partition/0/produce",
        {"key": "order-1", "value": '{"total": 42}', "headers": "source=console"},
    )
    assert "produced a record at offset 0" in admin.css("[role=status]").text
    with _client(broker) as client:
        [record] = list(iter_records(client.fetch("web-orders", 0, 0).records))
        assert (record.key, record.value, record.headers) == (
            b"order-1",
            b'{"total": 42}',
            (("source", b"console"),),
        )
        client.produce(
            "web-orders",
            0,
            encode_batch([(b"order-2", b"plain", None, None)], now_ms=int(time.time() * 1000)),
        )
    path = "/console/topic/web-orders/partition/0/records"
    admin.open(path)
    admin.fill(path, {"offset": "1"}, select={"from": "offset"})
    assert [td.text for td in admin.all("tbody tr td:nth-child(1)")] == ["1"]
    admin.open(path)
    admin.fill(path, {"time": str(before)}, select={"from": "time"})
    assert [td.text for td in admin.all("tbody tr td:nth-child(1)")] == ["0", "1"]
    admin.open("/console/topic/web-orders/delete")
    admin.fill("/console/topic/web-orders/delete", {"confirm": "web-orders"})
    assert "deleted topic web-orders" in admin.css("[role=status]").text
    with _client(broker) as client:
        assert client.metadata(["web-orders"])[0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_record_browser_formats(admin: Console, broker: BrokerProcess) -> None:
    with _client(broker) as client:
        client.create_topic("web-formats", 1)
        client.produce(
            "web-formats",
            0,
            encode_batch(
                [(b"k", json.dumps({"a": [1, 2]}).encode(), [("bin", b"\x01\x02")], None)],
                now_ms=int(time.time() * 1000),
            ),
        )
    path = "/console/topic/web-formats/partition/0/records"
    admin.open(path)
    admin.fill(path, {}, select={"format": "json"})
    value = admin.css("tbody tr td:nth-child(4) pre").text
    assert json.loads(value) == {"a": [1, 2]} and "\n" in value
    admin.open(path + "?format=hex", shot="records")
    assert admin.css("tbody tr td:nth-child(4) pre").text.startswith("7b 22 61 22")
    assert "01 02" in admin.css("tbody tr td:nth-child(5)").text
    admin.open(path + "?format=text")
    assert admin.css("tbody tr td:nth-child(4) pre").text == '{"a": [1, 2]}'


def test_segment_map_verdicts(admin: Console, broker: BrokerProcess) -> None:
    old = int(time.time() * 1000) - 10 * 86_400_000
    with _client(broker) as client:
        client.create_topic("web-aged", 1, {"retention.ms": 86_400_000, "segment.bytes": 1024})
        for i in range(5):
            client.produce("web-aged", 0, encode_batch([(None, b"v" * 400, None, old + i)]))
        client.produce(
            "web-aged",
            0,
            encode_batch([(None, b"now", None, None)], now_ms=int(time.time() * 1000)),
        )
        explained = client.request("explain_retention", {"topic": "web-aged", "partitions": [0]})
    admin.open("/console/topic/web-aged/partition/0", shot="segments")
    shown = [s.get_attribute("data-verdict") for s in admin.all("[data-verdict]")]
    assert shown == [s["verdict"] for s in explained["partitions"][0]["segments"]]
    assert "delete_time" in shown and shown[-1] == "keep_active"


def test_group_lag_and_a_dry_run_reset(admin: Console, broker: BrokerProcess) -> None:
    with _client(broker) as client:
        client.create_topic("web-billing", 1)
        client.produce(
            "web-billing",
            0,
            encode_batch([(None, b"x", None, None)] * 8, now_ms=int(time.time() * 1000)),
        )
        client.call(commit_offsets("web-payers", {("web-billing", 0): 3}))
    admin.open("/console/groups")
    admin.open("/console/group/web-payers", shot="group")
    assert [e.text for e in admin.all("[data-lag]")] == ["5"]
    admin.fill("/console/group/web-payers/reset", {}, select={"strategy": "earliest"})
    assert "Dry run" in admin.css("#reset-mode").text
    assert [e.text for e in admin.all("[data-new-offset]")] == ["0"]
    with _client(broker) as client:
        assert client.call(fetch_offsets("web-payers"))[("web-billing", 0)].offset == 3
    admin.open("/console/group/web-payers")
    admin.fill(
        "/console/group/web-payers/reset",
        {"value": "7"},
        select={"strategy": "offset", "execute": "yes"},
    )
    assert "Offsets stored" in admin.css("#reset-mode").text
    with _client(broker) as client:
        assert client.call(fetch_offsets("web-payers"))[("web-billing", 0)].offset == 7


def test_a_forged_form_is_refused(admin: Console, broker: BrokerProcess) -> None:
    admin.open("/console/topics")
    admin.driver.execute_script(
        "document.querySelector('form[action=\"/console/topics/create\"] input[name=csrf]')"
        ".value = 'forged'"
    )
    admin.fill("/console/topics/create", {"topic": "web-forged", "partitions": "1"}, refused=True)
    assert admin.heading() == "Refused"
    with _client(broker) as client:
        assert client.metadata(["web-forged"])[0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_security_page_and_a_user_without_acls(
    chrome: Any, broker: BrokerProcess, shots: Path | None
) -> None:
    admin = Console(chrome, broker, shots)
    admin.login(ADMIN, ADMIN_PASSWORD)
    admin.open("/console/security", shot="security")
    assert NOBODY in admin.css("table").text
    admin.every_field_is_labelled()
    logout = admin.css("form[action='/console/logout'] button")
    logout.click()
    admin.wait_for_new_page(logout)
    bob = admin
    bob.login(NOBODY, NOBODY_PASSWORD)
    assert bob.heading() == "Overview"
    assert bob.css("#topic-count").text == "0"
    bob.open("/console/topics")
    assert bob.all("tbody tr td a") == []
    bob.driver.get(bob.base + "/console/topic/bulk-00001")
    assert bob.heading() == "Refused"
    bob.driver.get(bob.base + "/console/security")
    assert bob.heading() == "Refused"
