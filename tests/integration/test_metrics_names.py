"""Issue 38 #7: the metrics page is no second door to the names the authorizer hides.

Kafka's JMX metrics carry topic names too, but on a port clients are not given. With
authentication on (a SASL or mTLS listener, or `authorizer=on`) Tidelog's `/metrics`
leaves out every series labelled with a topic or group name, unless
`metrics.bearer.token.file` makes `/metrics` require `Authorization: Bearer <token>`
(then names are shown to whoever has the token). `metrics.name.labels=on|off`
decides explicitly. The health endpoints reveal no names and stay open. The real
`tidelog serve`.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from broker.security.credentials import CredentialStore
from protocol.offsets_schema import commit_offsets
from protocol.sasl.scram import ITERATIONS_MIN
from tests.conftest import BrokerFactory, BrokerProcess
from tidelog.client import Client
from tidelog.security import Security

SASL = ("listeners=SASL_PLAINTEXT://127.0.0.1:0", "authorizer=on", "super.users=User:admin")
TOPIC = "secret-orders"
GROUP = "secret-billing"
TOKEN = "s3cr3t-scraper-token"


def _get(broker: BrokerProcess, path: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.metrics_port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _start(broker_factory: BrokerFactory, tmp_path: Path, *sets: str) -> BrokerProcess:
    data = tmp_path / "data"
    CredentialStore(data).set_user("admin", "pw-admin", iterations=ITERATIONS_MIN)
    broker = broker_factory(*SASL, *sets, data_dir=data)
    admin = Security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password="pw-admin",
    )
    with Client(broker.bootstrap, security=admin) as client:
        client.create_topic(TOPIC)
        client.call(commit_offsets(GROUP, {(TOPIC, 0): 0}))
    return broker


def test_with_authentication_on_metrics_carry_no_topic_or_group_name(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = _start(broker_factory, tmp_path)
    status, body = _get(broker, "/metrics")
    assert status == 200 and "tidelog_requests_total" in body
    assert TOPIC not in body and GROUP not in body
    assert 'topic="' not in body and 'group="' not in body
    hidden = broker.wait_for_event("metrics_name_labels_off")
    assert "metrics.bearer.token.file" in hidden["hint"]


def test_a_bearer_token_guards_metrics_and_then_names_are_shown(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    broker = _start(broker_factory, tmp_path, f"metrics.bearer.token.file={token_file}")
    assert _get(broker, "/metrics")[0] == 401
    assert _get(broker, "/metrics", "wrong")[0] == 401
    status, body = _get(broker, "/metrics", TOKEN)
    assert status == 200 and f'topic="{TOPIC}"' in body and f'group="{GROUP}"' in body
    for path in ("/healthz", "/livez", "/readyz"):  # no names there: open
        assert _get(broker, path)[0] == 200


def test_name_labels_can_be_turned_off_explicitly(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text(TOKEN)
    sets = (f"metrics.bearer.token.file={token_file}", "metrics.name.labels=off")
    broker = _start(broker_factory, tmp_path, *sets)
    status, body = _get(broker, "/metrics", TOKEN)
    assert status == 200 and TOPIC not in body and GROUP not in body
