"""The console over HTTP against the real broker process: every action changes what a
client then sees, and the reads show what the client API answers."""

from __future__ import annotations

import json
import re
import time

import pytest

from protocol.batch import encode_batch, iter_records
from protocol.offsets_schema import commit_offsets, fetch_offsets
from tests.conftest import BrokerFactory, BrokerProcess
from tests.console.conftest import browser_for
from tests.integration.test_groups import GROUP_SETTINGS, Member, fill_topic, wait_until
from tidelog import Client

pytestmark = pytest.mark.integration


def _client(broker: BrokerProcess) -> Client:
    return Client(broker.bootstrap, client_id="console-test")


def test_overview_beside_metrics_and_health(open_broker: BrokerProcess) -> None:
    web = browser_for(open_broker)
    page = web.get("/console/")
    assert page.status == 200
    assert "Overview" in page.text and "User:ANONYMOUS" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert (
        "HttpOnly" in page.headers["set-cookie"] and "SameSite=Strict" in page.headers["set-cookie"]
    )
    assert web.get("/").location == "/console/" or web.get("/").status == 200
    assert web.get("/console/static/console.js").status == 200
    assert web.get("/console/static/../app.py").status == 404
    assert web.get("/metrics").status == 200
    assert web.get("/healthz").text == "ok\n"
    feed = json.loads(web.get("/console/api/metrics").text)
    assert set(feed["values"]) == {"records_in", "bytes_in", "bytes_out", "connections"}


def test_topic_lifecycle_through_the_console_is_what_a_client_sees(
    open_broker: BrokerProcess,
) -> None:
    web = browser_for(open_broker)
    made = web.post(
        "/console/topics/create",
        {"topic": "orders", "partitions": "2", "configs": "retention.ms=3600000"},
    )
    assert made.status == 303 and made.location.startswith("/console/topic/orders")
    with _client(open_broker) as client:
        [entry] = client.metadata(["orders"])
        assert len(entry["partitions"]) == 2
        assert client.describe_configs("orders")["retention.ms"]["value"] == 3600000
        client.produce(
            "orders",
            1,
            encode_batch([(b"k", b"from-client", None, None)], now_ms=int(time.time() * 1000)),
        )
    changed = web.post(
        "/console/topic/orders/configs", {"set": "retention.ms=7200000", "delete": ""}
    )
    assert changed.status == 303
    produced = web.post(
        "/console/topic/orders/partition/1/produce",
        {"key": "k2", "value": "from-console", "headers": "h=v"},
    )
    assert produced.status == 303 and "offset=1" in produced.location
    with _client(open_broker) as client:
        assert client.describe_configs("orders")["retention.ms"]["source"] == "topic"
        assert client.describe_configs("orders")["retention.ms"]["value"] == 7200000
        fetched = client.fetch("orders", 1, 0)
        assert [r.value for r in iter_records(fetched.records)] == [b"from-client", b"from-console"]
    topic_page = web.get("/console/topic/orders")
    assert "7200000" in topic_page.text and "<td>topic</td>" in topic_page.text
    cut = web.post("/console/topic/orders/delete-records", {"partition": "1", "offset": "1"})
    assert cut.status == 303
    with _client(open_broker) as client:
        earliest = client.list_offsets("orders", 1, "earliest")
        assert earliest is not None and earliest.offset == 1
    refused = web.post("/console/topic/orders/delete", {"confirm": "order"})
    assert refused.status == 303 and "problem=" in refused.location
    assert "orders" in [e["topic"] for e in _client_topics(open_broker)]
    gone = web.post("/console/topic/orders/delete", {"confirm": "orders"})
    assert gone.status == 303
    assert "orders" not in [e["topic"] for e in _client_topics(open_broker)]
    assert web.get("/console/topic/orders").status == 404


def _client_topics(broker: BrokerProcess) -> list[dict[str, object]]:
    with _client(broker) as client:
        return [e for e in client.metadata() if not e.get("error")]


def test_record_browser_by_offset_time_start_end_and_key(open_broker: BrokerProcess) -> None:
    with _client(open_broker) as client:
        client.create_topic("events", 1)
        base = 1_700_000_000_000
        rows = [
            (
                f"k{i % 3}".encode(),
                json.dumps({"n": i}).encode(),
                [("h", b"\x00\xff")],
                base + i * 1000,
            )
            for i in range(30)
        ]
        for start in range(0, 30, 10):
            client.produce("events", 0, encode_batch(rows[start : start + 10]))
    web = browser_for(open_broker)
    path = "/console/topic/events/partition/0/records"

    def offsets(query: str) -> list[int]:
        page = web.get(f"{path}?{query}")
        assert page.status == 200, page.text
        return [int(o) for o in re.findall(r"<tr><td>(\d+)</td>", page.text)]

    assert offsets("from=offset&offset=12&limit=5") == [12, 13, 14, 15, 16]
    assert offsets(f"from=time&time={base + 20_500}&limit=3") == [21, 22, 23]
    assert offsets("from=time&time=2023-11-14T22:13:40Z&limit=2") == [20, 21]
    assert offsets("from=start&limit=2") == [0, 1]
    assert offsets("from=end&limit=4") == [26, 27, 28, 29]
    assert offsets("from=start&key=k1&limit=4") == [1, 4, 7, 10]
    as_json = web.get(f"{path}?from=offset&offset=7&limit=1&format=json").text
    assert "&quot;n&quot;: 7" in as_json and "\n" in as_json.split("&quot;n&quot;")[0][-3:]
    as_hex = web.get(f"{path}?from=offset&offset=7&limit=1&format=hex").text
    assert "7b 22 6e 22 3a 20 37 7d" in as_hex and "00 ff" in as_hex
    # A page of 5 records from a 10-record batch reads one 64 KiB fetch, and the
    # next-page link starts where this page stopped.
    page = web.get(f"{path}?from=offset&offset=0&limit=5").text
    assert "from offset 5" in page


def test_group_lag_and_reset_dry_run_then_execute(open_broker: BrokerProcess) -> None:
    with _client(open_broker) as client:
        client.create_topic("billing", 2)
        for p in (0, 1):
            client.produce(
                "billing",
                p,
                encode_batch([(None, b"x", None, None)] * 10, now_ms=int(time.time() * 1000)),
            )
        client.call(commit_offsets("payers", {("billing", 0): 4, ("billing", 1): 10}))
    web = browser_for(open_broker)
    assert "payers" in web.get("/console/groups").text
    group = web.get("/console/group/payers").text
    assert re.findall(r'data-lag="(\d+)"', group) == ["6", "0"]
    lag = json.loads(web.get("/console/api/group/payers/lag").text)
    assert lag["values"]["lag"] == 6
    dry = web.post(
        "/console/group/payers/reset",
        {"topic": "", "strategy": "earliest", "value": "", "time": "", "execute": ""},
    )
    assert dry.status == 200 and "Dry run" in dry.text
    assert re.findall(r'data-new-offset="(\d+)"', dry.text) == ["0", "0"]
    with _client(open_broker) as client:
        assert {tp: o.offset for tp, o in client.call(fetch_offsets("payers")).items()} == {
            ("billing", 0): 4,
            ("billing", 1): 10,
        }
    done = web.post(
        "/console/group/payers/reset",
        {"topic": "billing", "strategy": "shift", "value": "-3", "time": "", "execute": "yes"},
    )
    assert done.status == 200 and "Offsets stored" in done.text
    with _client(open_broker) as client:
        assert {tp: o.offset for tp, o in client.call(fetch_offsets("payers")).items()} == {
            ("billing", 0): 1,
            ("billing", 1): 7,
        }


def test_segment_map_shows_the_retention_explain_verdicts(open_broker: BrokerProcess) -> None:
    old = int(time.time() * 1000) - 10 * 24 * 3600 * 1000
    with _client(open_broker) as client:
        client.create_topic("aged", 1, {"retention.ms": 86_400_000, "segment.bytes": 1024})
        for i in range(6):
            client.produce("aged", 0, encode_batch([(None, b"v" * 400, None, old + i)]))
        client.produce(
            "aged", 0, encode_batch([(None, b"new", None, None)], now_ms=int(time.time() * 1000))
        )
        explained = client.request("explain_retention", {"topic": "aged", "partitions": [0]})
    expected = [(s["base_offset"], s["verdict"]) for s in explained["partitions"][0]["segments"]]
    assert {"delete_time", "keep_active"} <= {v for _, v in expected}
    page = browser_for(open_broker).get("/console/topic/aged/partition/0")
    assert page.status == 200
    shown = re.findall(r"<tr><td>(\d+)</td>.*?data-verdict=\"([a-z_]+)\"", page.text)
    assert [(int(b), v) for b, v in shown] == expected
    for segment in explained["partitions"][0]["segments"]:
        assert segment["reason"].split(";")[0].replace("'", "&#x27;") in page.text


def test_topics_are_searched_and_paged_not_listed_whole(open_broker: BrokerProcess) -> None:
    with _client(open_broker) as client:
        for i in range(130):
            client.send(
                "create_topic",
                {"topic": f"t-{i:04d}", "partitions": 1, "configs": {}, "validate_only": False},
            )
        for _ in range(130):
            client.receive()
    web = browser_for(open_broker)
    first = web.get("/console/topics?size=50").text
    assert len(re.findall(r'href="/console/topic/t-\d{4}"', first)) == 50
    assert "page 1 of 3" in first and "130 topics" in first
    last = web.get("/console/topics?size=50&page=3").text
    assert len(re.findall(r'href="/console/topic/t-\d{4}"', last)) == 30
    found = web.get("/console/topics?q=t-012").text
    assert re.findall(r'href="/console/topic/(t-\d{4})"', found) == [f"t-012{i}" for i in range(10)]


def test_state_changes_need_the_sessions_csrf_token(open_broker: BrokerProcess) -> None:
    web = browser_for(open_broker)
    web.get("/console/topics")
    assert web.post("/console/topics/create", {"topic": "a"}, csrf="").status == 403
    assert web.post("/console/topics/create", {"topic": "a"}, csrf="forged").status == 403
    other = browser_for(open_broker)
    other.get("/console/topics")
    assert web.post("/console/topics/create", {"topic": "a"}, csrf=other.csrf).status == 403
    cross = web.post("/console/topics/create", {"topic": "a"}, Origin="http://evil.example")
    assert cross.status == 403
    assert "a" not in [e["topic"] for e in _client_topics(open_broker)]
    ok = web.post(
        "/console/topics/create",
        {"topic": "a", "partitions": "1"},
        Origin=f"http://127.0.0.1:{open_broker.metrics_port}",
    )
    assert ok.status == 303
    assert "a" in [e["topic"] for e in _client_topics(open_broker)]
    assert any(e.get("event") == "console_csrf_refused" for e in open_broker.events())


def test_a_live_groups_members_and_assignments_and_no_reset_while_it_runs(
    broker_factory: BrokerFactory,
) -> None:
    open_broker = broker_factory(*GROUP_SETTINGS)
    fill_topic(open_broker, "live", partitions=2)
    member = Member(open_broker, "live-readers", "live")
    try:
        wait_until(lambda: member.assigned == frozenset({0, 1}), 20, "the member is assigned")
        web = browser_for(open_broker)
        page = web.get("/console/group/live-readers").text
        assert re.search(r"<strong id=state>Stable</strong>", page)
        assert "live: 0,1" in page
        refused = web.post(
            "/console/group/live-readers/reset",
            {"topic": "", "strategy": "earliest", "value": "", "time": "", "execute": "yes"},
        )
        assert refused.status == 400 and "NON_EMPTY_GROUP" in refused.text
    finally:
        member.stop()
