"""The console's security against the real broker: SCRAM-checked logins, the same ACLs
as clients, audit lines, no secret in a page, TLS, and where it is off."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
from pathlib import Path

import pytest

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from broker.security.credentials import CREDENTIALS_FILE
from tests.broker.security.conftest import Pki, add_user, make_pki
from tests.conftest import BrokerFactory, BrokerProcess
from tests.console.conftest import ADMIN, ADMIN_PASSWORD, NOBODY, NOBODY_PASSWORD, browser_for
from tests.console.web import Browser

pytestmark = pytest.mark.integration

PAGES = (
    "/console/",
    "/console/topics",
    "/console/topic/paid",
    "/console/topic/paid/partition/0",
    "/console/topic/paid/partition/0/records",
    "/console/groups",
    "/console/security",
)


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerProcess:
    """authorizer=on: `admin` is a super user, `bob` a user without any ACL."""
    data = tmp_path / "data"
    data.mkdir()
    add_user(data, ADMIN, ADMIN_PASSWORD)
    add_user(data, NOBODY, NOBODY_PASSWORD)
    return broker_factory("authorizer=on", f"super.users=User:{ADMIN}", data_dir=data)


def _audit(broker: BrokerProcess, event: str) -> list[dict[str, object]]:
    return [e for e in broker.events(event) if e.get("component") == "audit"]


def test_login_is_required_and_checked_against_the_scram_credential(secured: BrokerProcess) -> None:
    web = browser_for(secured)
    assert web.get("/console/topics").location == "/console/login"
    assert web.get("/console/api/metrics").status == 401
    wrong = web.login(ADMIN, "not-the-password")
    assert wrong.status == 401 and "Wrong user name or password" in wrong.text
    unknown = web.login("nobody-at-all", "whatever")
    assert unknown.status == 401 and unknown.text.count("Wrong user name") == 1
    before = dict(web.cookies)
    ok = web.login(ADMIN, ADMIN_PASSWORD)
    assert ok.status == 303 and ok.location == "/console/"
    assert web.cookies != before  # a new session id after the login (no fixation)
    assert "User:admin" in web.get("/console/").text
    failed = _audit(secured, "authentication_failed")
    assert {e["principal"] for e in failed} == {"User:admin", "User:nobody-at-all"}
    assert [e["principal"] for e in _audit(secured, "authentication_succeeded")] == ["User:admin"]
    web.post("/console/logout", {})
    assert web.get("/console/topics").location == "/console/login"


def test_a_user_without_acls_sees_nothing_and_is_refused(secured: BrokerProcess) -> None:
    admin = browser_for(secured)
    admin.login(ADMIN, ADMIN_PASSWORD)
    assert admin.post("/console/topics/create", {"topic": "paid", "partitions": "1"}).status == 303
    bob = browser_for(secured)
    assert bob.login(NOBODY, NOBODY_PASSWORD).status == 303
    listing = bob.get("/console/topics")
    assert listing.status == 200 and "0 topics" in listing.text and "paid" not in listing.text
    assert bob.get("/console/topic/paid").status == 403
    assert bob.get("/console/topic/paid/partition/0").status == 403
    assert bob.get("/console/topic/paid/partition/0/records").status == 403
    assert bob.get("/console/security").status == 403
    created = bob.post("/console/topics/create", {"topic": "mine", "partitions": "1"})
    assert created.status == 403 and "TOPIC_AUTHORIZATION_FAILED" in created.text
    produced = bob.post("/console/topic/paid/partition/0/produce", {"key": "", "value": "x"})
    assert produced.status == 403
    denied = _audit(secured, "request_denied")
    assert {(e["principal"], e["api"]) for e in denied} >= {
        ("User:bob", "create_topic"),
        ("User:bob", "produce"),
        ("User:bob", "explain_retention"),
    }
    actions = _audit(secured, "console_action")
    assert {(e["principal"], e["action"], e["outcome"]) for e in actions} >= {
        ("User:admin", "create_topic", "ok"),
        ("User:bob", "create_topic", "TOPIC_AUTHORIZATION_FAILED"),
    }
    # An ACL granted through the console (by the super user) opens exactly that topic.
    grant = {
        "principal": "User:bob",
        "host": "*",
        "resource_type": "Topic",
        "resource_name": "paid",
        "pattern_type": "Literal",
        "operation": "Read",
        "permission": "Allow",
    }
    assert admin.post("/console/security/acls/add", grant).status == 303
    assert AclStore(secured.data_dir).bindings()  # the same store `tidelog acls` reads
    assert bob.get("/console/topic/paid/partition/0/records").status == 200
    assert "paid" in bob.get("/console/topics").text
    assert bob.post("/console/topics/create", {"topic": "mine", "partitions": "1"}).status == 403


def test_no_secret_in_any_page(secured: BrokerProcess) -> None:
    AclStore(secured.data_dir).add(
        [
            AclBinding.from_json(
                {
                    "principal": "User:bob",
                    "host": "*",
                    "resource_type": "Topic",
                    "resource_name": "paid",
                    "pattern_type": "Literal",
                    "operation": "Read",
                    "permission": "Allow",
                }
            )
        ]
    )
    web = browser_for(secured)
    web.login(ADMIN, ADMIN_PASSWORD)
    web.post("/console/topics/create", {"topic": "paid", "partitions": "1"})
    stored = json.loads((secured.data_dir / CREDENTIALS_FILE).read_text())
    secrets = {ADMIN_PASSWORD, NOBODY_PASSWORD}
    for mechs in stored["users"].values():
        for entry in mechs.values():
            secrets |= {entry["salt"], entry["stored_key"], entry["server_key"]}
    seen = "".join(web.get(path).text for path in PAGES)
    assert "User:bob" in seen and "SCRAM-SHA-512" in seen  # the security page was shown
    assert not [s for s in secrets if s in seen]
    assert ADMIN_PASSWORD not in "\n".join(secured.lines)


def test_over_tls_the_session_cookie_is_secure(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    pki: Pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    data.mkdir()
    add_user(data, ADMIN, ADMIN_PASSWORD)
    broker = broker_factory(
        "authorizer=on",
        f"super.users=User:{ADMIN}",
        *pki.tls_sets(),
        "metrics.ssl.enable=true",
        data_dir=data,
    )
    web = Browser(
        "127.0.0.1", broker.metrics_port, tls=ssl.create_default_context(cafile=str(pki.ca_file))
    )
    page = web.get("/console/login")
    assert page.status == 200 and "; Secure" in page.headers["set-cookie"]
    assert web.login(ADMIN, ADMIN_PASSWORD).status == 303
    assert "User:admin" in web.get("/console/").text


def test_off_beyond_loopback_unless_enabled_and_never_in_the_clear_with_logins(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    wide = broker_factory(extra_args=("--metrics-listen", "0.0.0.0:0"), data_dir=tmp_path / "a")
    web = browser_for(wide)
    assert web.get("/console/").status == 404
    assert web.get("/healthz").status == 200
    on = broker_factory(
        "console.enable=on", extra_args=("--metrics-listen", "0.0.0.0:0"), data_dir=tmp_path / "b"
    )
    assert browser_for(on).get("/console/").status == 200
    off = broker_factory("console.enable=off", data_dir=tmp_path / "c")
    assert browser_for(off).get("/console/").status == 404
    refused = broker_factory(
        "console.enable=on",
        "authorizer=on",
        data_dir=tmp_path / "d",
        extra_args=("--metrics-listen", "0.0.0.0:0"),
        wait=False,
    )
    try:
        refused.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("a console sending logins in the clear was started")
    assert refused.proc.returncode != 0
    [failed] = refused.events("startup_failed")
    assert re.search(r"console\.enable: .*in the clear", str(failed["reason"]))
