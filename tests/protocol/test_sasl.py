"""SASL PLAIN and SCRAM (protocol/sasl/): RFC 7677's vector, scramp as a peer, bad input."""

from __future__ import annotations

import base64

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import IllegalSaslState, SaslAuthenticationFailed, UnsupportedSaslMechanism
from protocol.sasl import (
    ScramClient,
    ScramServer,
    derive_credential,
    parse_plain,
    plain_message,
    scram_mechanism,
)
from protocol.sasl.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    escape_name,
    password_matches,
    unescape_name,
)

# RFC 7677 §3, the SCRAM-SHA-256 example.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _store(mechanism, users: dict[str, str], iterations: int = 4096):
    creds = {u: derive_credential(mechanism, p, iterations=iterations) for u, p in users.items()}
    return creds.get


def test_rfc7677_vector_client_side() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_rfc7677_vector_server_side() -> None:
    credential = derive_credential(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)
    server = ScramServer(SCRAM_SHA_256, {"user": credential}.get, nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user" and server.done


def test_rfc7677_vector_refuses_a_tampered_server_signature() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationFailed, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scramp_client_against_our_server(name: str) -> None:
    mechanism = scram_mechanism(name)
    server = ScramServer(mechanism, _store(mechanism, {"alice": "s3cret"}))
    client = scramp.ScramClient([name], "alice", "s3cret")
    server_first = server.first(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.final(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # raises if our signature were wrong
    assert server.username == "alice"


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_our_client_against_scramp_server(name: str) -> None:
    mechanism = scramp.ScramMechanism(name)
    info = mechanism.make_auth_info("s3cret", iteration_count=4096)
    server = mechanism.make_server(lambda username: info)
    client = ScramClient(scram_mechanism(name), "alice", "s3cret")
    server.set_client_first(client.first().decode())
    final = client.final(server.get_server_first().encode())
    server.set_client_final(final.decode())
    client.verify(server.get_server_final().encode())


def test_scramp_derives_the_same_stored_form() -> None:
    """Our stored credential is SCRAM's own format: scramp computes the same keys."""
    salt = b"0123456789abcdef"
    ours = derive_credential(SCRAM_SHA_512, "pa55", salt=salt, iterations=4096)
    theirs = scramp.ScramMechanism("SCRAM-SHA-512").make_auth_info(
        "pa55", iteration_count=4096, salt=salt
    )
    assert (ours.salt, ours.stored_key, ours.server_key, ours.iterations) == theirs


def _run(server: ScramServer, client: ScramClient) -> None:
    server_first = server.first(client.first())
    client.verify(server.final(client.final(server_first)))


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_wrong_password_fails(mechanism) -> None:
    server = ScramServer(mechanism, _store(mechanism, {"alice": "right"}))
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        _run(server, ScramClient(mechanism, "alice", "wrong"))
    assert server.username is None and not server.done


def test_unknown_user_fails_like_a_wrong_password() -> None:
    server = ScramServer(SCRAM_SHA_256, _store(SCRAM_SHA_256, {"alice": "pw"}))
    client = ScramClient(SCRAM_SHA_256, "mallory", "pw")
    first = server.first(client.first())
    assert b",s=" in first and b",i=" in first  # a decoy salt: no "no such user" answer
    with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
        server.final(client.final(first))


def test_a_credential_for_another_mechanism_does_not_log_in() -> None:
    server = ScramServer(SCRAM_SHA_512, _store(SCRAM_SHA_256, {"alice": "pw"}))
    with pytest.raises(SaslAuthenticationFailed):
        _run(server, ScramClient(SCRAM_SHA_512, "alice", "pw"))


def test_replayed_client_final_fails_against_a_new_server_nonce() -> None:
    lookup = _store(SCRAM_SHA_256, {"alice": "pw"})
    first_server = ScramServer(SCRAM_SHA_256, lookup)
    client = ScramClient(SCRAM_SHA_256, "alice", "pw")
    client_first = client.first()
    client_final = client.final(first_server.first(client_first))
    first_server.final(client_final)
    replay = ScramServer(SCRAM_SHA_256, lookup)
    replay.first(client_first)
    with pytest.raises(SaslAuthenticationFailed, match="nonce"):
        replay.final(client_final)


def test_steps_out_of_order_are_illegal_state() -> None:
    server = ScramServer(SCRAM_SHA_256, _store(SCRAM_SHA_256, {}))
    with pytest.raises(IllegalSaslState):
        server.final(b"c=biws,r=x,p=AAAA")
    with pytest.raises(SaslAuthenticationFailed):
        server.first(b"garbage")
    with pytest.raises(IllegalSaslState):  # a failed exchange cannot be continued
        server.first(b"n,,n=alice,r=abc")


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"p=tls-unique,,n=a,r=b",  # channel binding asked for
        b"n,,r=abc,n=alice",  # attributes out of order
        b"n,,n=alice",  # no nonce
        b"n,,n=al=ice,r=abc",  # bad escape
        b"n,a=bob,n=alice,r=abc",  # acting as someone else
        b"n,,n=alice,r=abc,m=x",  # mandatory extension
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens: none here
        b"\xff\xfe",
        b"n,,n=alice,r=" + b"a" * 5000,
    ],
)
def test_malformed_client_first_is_refused(message: bytes) -> None:
    server = ScramServer(SCRAM_SHA_256, _store(SCRAM_SHA_256, {"alice": "pw"}))
    with pytest.raises(SaslAuthenticationFailed):
        server.first(message)


@pytest.mark.parametrize(
    "server_first",
    [
        b"r=someoneelse,s=AAAA,i=4096",
        b"r=NONCEmore,s=AAAA,i=1000000",  # absurd iterations: a login-time DoS
        b"r=NONCEmore,s=AAAA,i=1",
        b"r=NONCEmore,s=!!!,i=4096",
        b"e=other-error",
    ],
)
def test_client_refuses_a_bad_server_first(server_first: bytes) -> None:
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", nonce="NONCE")
    client.first()
    with pytest.raises(SaslAuthenticationFailed):
        client.final(server_first)


@given(st.text(min_size=1, max_size=40))
def test_usernames_escape_and_unescape(name: str) -> None:
    escaped = escape_name(name)
    assert "," not in escaped
    assert unescape_name(escaped) == name


@given(
    user=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20),
    password=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20),
)
def test_any_user_and_password_round_trip(user: str, password: str) -> None:
    lookup = {user: derive_credential(SCRAM_SHA_256, password, iterations=4096)}.get
    server = ScramServer(SCRAM_SHA_256, lookup)
    _run(server, ScramClient(SCRAM_SHA_256, user, password))
    assert server.username == user


def test_stored_form_checks_a_plain_password() -> None:
    credential = derive_credential(SCRAM_SHA_512, "hunter2", iterations=4096)
    assert password_matches(SCRAM_SHA_512, credential, "hunter2")
    assert not password_matches(SCRAM_SHA_512, credential, "hunter3")


def test_iterations_below_rfc7677_minimum_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations"):
        derive_credential(SCRAM_SHA_256, "pw", iterations=4095)
    assert isinstance(derive_credential(SCRAM_SHA_256, "pw"), ScramCredential)


def test_unknown_mechanism() -> None:
    with pytest.raises(UnsupportedSaslMechanism):
        scram_mechanism("SCRAM-SHA-1")


def test_plain_round_trip_and_refusals() -> None:
    assert parse_plain(plain_message("alice", "pw")) == ("alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"alice\0pw", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw", b"\0a\0" + b"p" * 256):
        with pytest.raises(SaslAuthenticationFailed):
            parse_plain(bad)
