"""Issue 38 #6: neither SCRAM nor PLAIN tells a real user from an unknown name.

SCRAM's server-first message carries a salt and an iteration count: an unknown name
must get the same salt every time (across exchanges and restarts, as a real user
does) and an iteration count a real user could have. A PLAIN login with an unknown
name must run the same PBKDF2 derivation a wrong password for a real user runs; that
is asserted on the derivations made (hash and iterations), never on a clock.
"""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.security.credentials import DECOY_SECRET_FILE, CredentialStore
from protocol.auth_schema import authenticate
from protocol.errors import SaslAuthenticationFailed
from protocol.sasl.scram import ITERATIONS_MAX, ITERATIONS_MIN
from tidelog.aio import stream_client

SASL = "listeners=SASL_PLAINTEXT://127.0.0.1:0"
MECHANISMS = "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def _server_first(answer: bytes) -> dict[str, str]:
    return dict(part.split("=", 1) for part in answer.decode().split(","))


async def _salt_and_iterations(handle: Any, name: str, mechanism: str) -> tuple[bytes, int]:
    """What the broker answers a client-first message for `name` (then the client leaves)."""
    stream = await trio.open_tcp_stream(handle.host, handle.port)
    async with stream_client(stream) as client:
        answer, _, _ = await client.call(authenticate(mechanism, f"n,,n={name},r=abc".encode()))
    first = _server_first(answer)
    return base64.b64decode(first["s"]), int(first["i"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_an_unknown_name_answers_like_a_real_user_across_exchanges_and_restarts(
    secured_broker: Any, tmp_path: Path, mechanism: str
) -> None:
    data = tmp_path / "data"
    # Every real user at the maximum: a decoy at any other count would give it away.
    CredentialStore(data).set_user("alice", "pw", iterations=ITERATIONS_MAX)
    CredentialStore(data).set_user("bob", "pw", iterations=ITERATIONS_MAX)
    async with secured_broker(SASL, MECHANISMS) as handle:
        real = await _salt_and_iterations(handle, "alice", mechanism)
        assert real == await _salt_and_iterations(handle, "alice", mechanism)
        first = await _salt_and_iterations(handle, "mallory", mechanism)
        assert first == await _salt_and_iterations(handle, "mallory", mechanism)
        other = await _salt_and_iterations(handle, "trudy", mechanism)
    async with secured_broker(SASL, MECHANISMS) as handle:  # the same data dir, restarted
        assert first == await _salt_and_iterations(handle, "mallory", mechanism)
        assert real == await _salt_and_iterations(handle, "alice", mechanism)
    assert first[1] == other[1] == real[1] == ITERATIONS_MAX  # the users' count
    assert len(first[0]) == len(real[0])  # the same shape of salt
    assert len({first[0], other[0], real[0]}) == 3  # one salt per name
    secret = data / DECOY_SECRET_FILE
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_decoy_iterations_follow_the_users_counts(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.set_user("a", "pw", iterations=ITERATIONS_MIN)
    store.set_user("b", "pw", iterations=ITERATIONS_MAX)
    counts = {store.decoy("SCRAM-SHA-256", f"nobody{i}").iterations for i in range(64)}
    assert counts == {ITERATIONS_MIN, ITERATIONS_MAX}
    # A user that exists answers its own credential; the decoy is never a real one.
    real = store.lookup("SCRAM-SHA-256", "a")
    assert real is not None and store.decoy("SCRAM-SHA-256", "a") != real


def _derivations(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every PBKDF2 derivation from now on as (hash, salt length, iterations)."""
    seen: list[tuple[str, int, int]] = []
    real = hashlib.pbkdf2_hmac

    def counting(name: str, password: bytes, salt: bytes, iterations: int, *a: Any) -> bytes:
        seen.append((name, len(salt), iterations))
        return real(name, password, salt, iterations, *a)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    return seen


def test_plain_with_an_unknown_name_derives_as_a_wrong_password_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CredentialStore(tmp_path)
    store.set_user("alice", "right", iterations=ITERATIONS_MAX)
    derivations = _derivations(monkeypatch)
    assert not store.check_password("alice", "wrong")
    wrong_password = list(derivations)
    derivations.clear()
    assert not store.check_password("mallory", "wrong")
    assert derivations == wrong_password == [("sha256", 32, ITERATIONS_MAX)]


async def test_plain_refuses_an_unknown_name_with_the_wrong_password_message(
    secured_broker: Any, tmp_path: Path
) -> None:
    CredentialStore(tmp_path / "data").set_user("alice", "pw", iterations=ITERATIONS_MIN)
    async with secured_broker(SASL, MECHANISMS) as handle:
        for name in ("alice", "mallory"):
            stream = await trio.open_tcp_stream(handle.host, handle.port)
            async with stream_client(stream) as client:
                with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
                    await client.call(authenticate("PLAIN", f"\0{name}\0nope".encode()))
