"""Credential and ACL files (broker/security/): stored form, atomicity, live reload."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from broker.security.acl import AclBinding, AclFilter, Operation, Permission, ResourceType
from broker.security.acl_store import AclStore
from broker.security.credentials import CredentialStore
from protocol.sasl import ScramClient, ScramServer
from protocol.sasl.scram import ITERATIONS_MIN, SCRAM_SHA_512


def test_users_are_stored_in_scram_form_never_the_password(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.set_user("alice", "correct horse battery", iterations=ITERATIONS_MIN)
    raw = store.path.read_bytes()
    assert b"correct horse" not in raw
    document = json.loads(raw)
    entry = document["users"]["alice"]["SCRAM-SHA-512"]
    assert set(entry) == {"salt", "iterations", "stored_key", "server_key"}
    assert entry["iterations"] >= 4096
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.users() == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}


def test_a_stored_user_logs_in_with_scram_and_plain(tmp_path: Path) -> None:
    CredentialStore(tmp_path).set_user("alice", "pw", iterations=ITERATIONS_MIN)
    broker_view = CredentialStore(tmp_path)  # another process's view of the same dir
    server = ScramServer(SCRAM_SHA_512, lambda u: broker_view.lookup("SCRAM-SHA-512", u))
    client = ScramClient(SCRAM_SHA_512, "alice", "pw")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert broker_view.check_password("alice", "pw")
    assert not broker_view.check_password("alice", "pw2")
    assert not broker_view.check_password("nobody", "pw")


def test_changes_by_another_writer_are_seen_without_restart(tmp_path: Path) -> None:
    broker_view = CredentialStore(tmp_path)
    assert broker_view.lookup("SCRAM-SHA-256", "bob") is None
    cli = CredentialStore(tmp_path)
    cli.set_user("bob", "one", iterations=ITERATIONS_MIN)
    assert broker_view.check_password("bob", "one")
    cli.set_user("bob", "two", iterations=ITERATIONS_MIN)
    assert broker_view.check_password("bob", "two") and not broker_view.check_password("bob", "one")
    assert cli.delete_user("bob") and not cli.delete_user("bob")
    assert broker_view.lookup("SCRAM-SHA-256", "bob") is None


@pytest.mark.parametrize("name", ["", "a,b", "User:x", "a" * 256, "sp ace"])
def test_bad_usernames_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="username"):
        CredentialStore(tmp_path).set_user(name, "pw")


def test_no_temp_file_is_left_and_old_content_survives_a_failed_edit(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.set_user("alice", "pw", iterations=ITERATIONS_MIN)
    before = store.path.read_bytes()
    with pytest.raises(ValueError):
        store.set_user("bad name", "pw")
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "scram-credentials.json",
        "scram-credentials.json.lock",
    ]


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_acls_persist_apply_live_and_survive_a_restart(tmp_path: Path) -> None:
    clock = FakeMonotonic()
    broker = AclStore(tmp_path, monotonic=clock)
    read = (Operation.READ, ResourceType.TOPIC, "orders")
    assert not broker.authorizer().authorize("User:alice", "h", *read)
    cli = AclStore(tmp_path)
    grant = AclBinding.parse("User:alice", "*", "Topic", "orders", "Literal", "Read", "Allow")
    assert cli.add([grant, grant]) == 1 and cli.add([grant]) == 0
    clock.now += 1.0  # the broker re-checks the file at most once per interval
    assert broker.authorizer().authorize("User:alice", "h", *read)
    restarted = AclStore(tmp_path)
    assert restarted.bindings() == [grant]
    assert restarted.authorizer().authorize("User:alice", "h", *read)
    assert cli.remove(AclFilter(principal="User:alice")) == [grant]
    clock.now += 1.0
    assert not broker.authorizer().authorize("User:alice", "h", *read)


def test_acl_listing_filters(tmp_path: Path) -> None:
    store = AclStore(tmp_path)
    a = AclBinding.parse("User:a", "*", "Topic", "t", "Literal", "Read", "Allow")
    b = AclBinding.parse("User:b", "*", "Group", "g", "Prefixed", "Read", "Deny")
    store.add([a, b])
    assert store.bindings(AclFilter(resource_type=ResourceType.GROUP)) == [b]
    assert store.bindings(AclFilter(permission=Permission.ALLOW)) == [a]
    assert store.remove(AclFilter(principal="User:nobody")) == []
    assert len(store.bindings()) == 2
