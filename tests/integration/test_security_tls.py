"""TLS, SASL_SSL and mTLS against the real `tidelog serve` process, with certificates
made per run by trustme (tests/broker/security/conftest.py)."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from protocol.batch import encode_batch
from protocol.errors import SaslAuthenticationFailed, TopicAuthorizationFailed
from tests.broker.security.conftest import Pki, add_user, make_pki
from tests.conftest import ROOT
from tidelog import Client, Consumer, Producer, Security, TopicPartition

pytestmark = pytest.mark.integration

PASSWORD = "Sw0rdfish-only-in-tests"
WRONG = "Wr0ng-guess-not-logged"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def sasl_ssl(pki: Pki, user: str = "alice", password: str = PASSWORD, **kw: str) -> Security:
    return Security(
        security_protocol="SASL_SSL",
        ssl_cafile=str(pki.ca_file),
        sasl_mechanism=kw.get("mechanism", "SCRAM-SHA-512"),
        sasl_plain_username=user,
        sasl_plain_password=password,
    )


def test_sasl_ssl_with_our_clients_and_no_secret_in_logs(
    broker_factory, pki: Pki, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "alice", PASSWORD)
    broker = broker_factory(
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        *pki.tls_sets(),
    )
    addr = f"127.0.0.1:{broker.port}"
    with Client(addr, security=sasl_ssl(pki)) as client:
        client.create_topic("orders", partitions=1)
    with Producer(addr, security=sasl_ssl(pki, mechanism="PLAIN"), linger_ms=0) as producer:
        producer.send("orders", b"v1", key=b"k").get(timeout=10)
    consumer = Consumer(bootstrap_servers=addr, security=sasl_ssl(pki), consumer_timeout_ms=3000)
    consumer.assign([TopicPartition("orders", 0)])
    consumer.seek_to_beginning()
    assert [r.value for r in consumer] == [b"v1"]
    consumer.close()
    with pytest.raises(SaslAuthenticationFailed):
        Client(addr, security=sasl_ssl(pki, password=WRONG)).connect()
    with pytest.raises(SaslAuthenticationFailed):
        Client(addr, security=sasl_ssl(pki, password=WRONG, mechanism="PLAIN")).connect()
    with Client(addr, security=sasl_ssl(pki)) as client:  # still serving the others
        assert client.metadata()[0]["topic"] == "orders"
    failures = broker.events("authentication_failed")
    assert len(failures) == 2 and failures[0]["principal"] == "User:alice"
    assert len(broker.events("authentication_succeeded")) >= 3
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics").read()
    assert b'tidelog_authentications_total{mechanism="SCRAM-SHA-512",result="failure"} 1.0' in (
        metrics
    )
    broker.stop()
    text = broker.output() + metrics.decode()
    for secret in (PASSWORD, WRONG):
        assert secret not in text
    assert PASSWORD.encode() not in (data / "scram-credentials.json").read_bytes()


def test_plaintext_and_unknown_certificates_are_refused_and_others_served(
    broker_factory, pki: Pki, tmp_path: Path
) -> None:
    broker = broker_factory("listeners=SSL://127.0.0.1:0", *pki.tls_sets())
    addr = f"127.0.0.1:{broker.port}"
    # A msgpack frame is not a ClientHello: the broker drops the connection.
    with pytest.raises((ConnectionError, OSError)), Client(addr, request_timeout_ms=5000) as c:
        c.api_versions()
    other = make_pki(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        Client(addr, security=Security("SSL", ssl_cafile=str(other.ca_file))).connect()
    too_old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    too_old.load_verify_locations(str(pki.ca_file))
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        too_old.minimum_version = ssl.TLSVersion.TLSv1_1
        too_old.maximum_version = ssl.TLSVersion.TLSv1_1
    too_old.set_ciphers("DEFAULT@SECLEVEL=0")  # so this client really offers TLS 1.1
    with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", broker.port)) as raw:
        too_old.wrap_socket(raw, server_hostname="127.0.0.1")
    with Client(addr, security=Security("SSL", ssl_cafile=str(pki.ca_file))) as client:
        assert client.api_versions()["server"] == "tidelog"
    deadline = time.monotonic() + 10
    while len(broker.events("tls_handshake_failed")) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    failures = broker.events("tls_handshake_failed")
    assert len(failures) == 3 and all(f["client"] == "127.0.0.1" for f in failures)
    # The TLS 1.1 client was refused by the broker for its version, not by itself.
    assert "UNSUPPORTED_PROTOCOL" in failures[2]["detail"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_openssl_s_client_sees_only_tls12_and_tls13(broker_factory, pki: Pki) -> None:
    broker = broker_factory("listeners=SSL://127.0.0.1:0", *pki.tls_sets())

    def handshake(flag: str) -> bytes:
        result = subprocess.run(
            ["openssl", "s_client", "-brief", flag, "-cipher", "DEFAULT@SECLEVEL=0",
             "-connect", f"127.0.0.1:{broker.port}", "-CAfile", str(pki.ca_file),
             "-verify_return_error"],
            input=b"", capture_output=True, timeout=20,
        )  # fmt: skip
        return result.stdout + result.stderr

    for flag, version in (("-tls1_3", b"TLSv1.3"), ("-tls1_2", b"TLSv1.2")):
        out = handshake(flag)
        assert b"Verification: OK" in out and b"Protocol version: " + version in out
    for flag in ("-tls1_1", "-tls1"):  # offered, and refused by the broker
        assert b"Protocol version" not in handshake(flag)
    deadline = time.monotonic() + 10  # the broker logs each refusal as it closes
    while len(broker.events("tls_handshake_failed")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    refusals = [e["detail"] for e in broker.events("tls_handshake_failed")]
    assert len(refusals) == 2 and all("UNSUPPORTED_PROTOCOL" in d for d in refusals)


def test_mtls_principal_from_the_certificate_subject(
    broker_factory, pki: Pki, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    alice_dn = "User:CN=alice,OU=eng,O=Example"  # RFC 2253 order, as Kafka prints it
    AclStore(data).add([AclBinding.parse(alice_dn, "*", "Topic", "*", "Literal", "All", "Allow")])
    broker = broker_factory(
        "listeners=SSL://127.0.0.1:0",
        *pki.tls_sets(),
        f"ssl.cafile={pki.ca_file}",
        "ssl.client.auth=required",
        "authorizer=on",
    )
    addr = f"127.0.0.1:{broker.port}"
    ca = str(pki.ca_file)
    cert, key = pki.client_cert("alice", organization_name="Example", organization_unit_name="eng")
    with Client(addr, security=Security("SSL", ca, cert, key)) as client:
        client.create_topic("t")
        assert [t["topic"] for t in client.metadata()] == ["t"]
    bob_cert, bob_key = pki.client_cert(
        "bob", organization_name="Example", organization_unit_name="ops"
    )
    with Client(addr, security=Security("SSL", ca, bob_cert, bob_key)) as client:
        assert client.metadata() == []  # bob's subject has no ACL: nothing to see
        with pytest.raises(TopicAuthorizationFailed):
            client.fetch("t", 0, 0)
    past = datetime.now(UTC) - timedelta(days=2)
    old_cert, old_key = pki.client_cert("carol", not_before=past, not_after=past)
    stranger = make_pki(tmp_path / "stranger")
    mallory_cert, mallory_key = stranger.client_cert("alice")  # right name, wrong CA
    for c, k in ((None, None), (old_cert, old_key), (mallory_cert, mallory_key)):
        refused = pytest.raises((ssl.SSLError, ConnectionError, OSError))
        with refused, Client(addr, security=Security("SSL", ca, c, k)) as client:
            client.metadata()
    denied = broker.events("request_denied")
    assert any(
        e["principal"] == "User:CN=bob,OU=ops,O=Example" and e["api"] == "fetch" for e in denied
    )


def test_certificate_reload_on_sighup_and_metrics_over_tls(
    broker_factory, pki: Pki, tmp_path: Path
) -> None:
    broker = broker_factory(
        "listeners=SSL://127.0.0.1:0", *pki.tls_sets(), "metrics.ssl.enable=true"
    )
    addr = f"127.0.0.1:{broker.port}"
    with Client(addr, security=Security("SSL", ssl_cafile=str(pki.ca_file))) as client:
        client.api_versions()
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    url = f"https://127.0.0.1:{broker.metrics_port}/healthz"
    assert urllib.request.urlopen(url, context=context).read() == b"ok\n"
    renewed = make_pki(tmp_path / "renewed")  # a new CA signs the new certificate
    shutil.copy(renewed.cert_file, pki.cert_file)
    shutil.copy(renewed.key_file, pki.key_file)
    broker.send_signal(signal.SIGHUP)
    broker.wait_for_event("tls_reload_requested")
    deadline = time.monotonic() + 10
    while True:
        try:
            with Client(addr, security=Security("SSL", ssl_cafile=str(renewed.ca_file))) as c:
                c.api_versions()
            break
        except ssl.SSLError:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.2)
    with pytest.raises(ssl.SSLCertVerificationError):
        Client(addr, security=Security("SSL", ssl_cafile=str(pki.ca_file))).connect()


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_cli_users_then_commands_over_sasl_ssl(broker_factory, pki: Pki, tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = _cli("users", "add", "ops", "--data-dir", str(data), stdin=PASSWORD.encode() + b"\n")
    assert added.returncode == 0, added.stderr
    broker = broker_factory("listeners=SASL_SSL://127.0.0.1:0", *pki.tls_sets())
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.cafile={pki.ca_file}\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="ops" password="{PASSWORD}";\n'
    )
    server = ("--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", str(props))
    created = _cli("topics", "create", "audit-me", *server)
    assert created.returncode == 0, created.stderr
    listed = _cli("topics", "list", *server)
    assert b"audit-me" in listed.stdout
    refused = _cli("topics", "list", "--bootstrap-server", f"127.0.0.1:{broker.port}")
    assert refused.returncode == 1  # plaintext to a TLS port: a clean error, not a hang
    broker.stop()
    for out in (added, created, listed, refused):
        assert PASSWORD.encode() not in out.stdout + out.stderr
    assert PASSWORD not in broker.output()


def test_spark_connector_options_reach_a_sasl_ssl_broker(
    broker_factory, pki: Pki, tmp_path: Path
) -> None:
    """Spark's Kafka-source option names (kafka.security.protocol, kafka.sasl.jaas.config,
    ...) configure the driver's and the tasks' clients (no Spark needed to check that)."""
    from spark_connector.offsets import open_client
    from spark_connector.options import parse_sink_options, parse_source_options
    from spark_connector.reading import open_task_client

    add_user(tmp_path / "data", "spark", PASSWORD)
    broker = broker_factory("listeners=SASL_SSL://127.0.0.1:0", *pki.tls_sets())
    options = {
        "kafka.bootstrap.servers": f"127.0.0.1:{broker.port}",
        "subscribe": "events",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        f'required username="spark" password="{PASSWORD}";',
        "kafka.ssl.truststore.location": str(pki.ca_file),
    }
    source = parse_source_options(options, streaming=False)
    assert PASSWORD not in repr(source)
    with open_client(source) as driver:
        driver.create_topic("events")
    sink = parse_sink_options({k: v for k, v in options.items() if k != "subscribe"})
    with Client(sink.bootstrap_servers, security=sink.security) as writer:
        writer.produce("events", 0, encode_batch([(b"k", b"v", (), 1_700_000_000_000)]))
    with open_task_client(source) as task:
        assert task.fetch("events", 0, 0).high_watermark == 1
    wrong = {**options, "kafka.sasl.jaas.config": 'x required username="spark" password="no";'}
    with pytest.raises(SaslAuthenticationFailed):
        open_client(parse_source_options(wrong, streaming=False)).connect()
