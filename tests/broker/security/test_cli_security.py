"""`tidelog users` and `tidelog acls` on a data directory (broker/cli/users.py, cli_acls.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from broker.cli.main import main
from broker.security.acl import Operation, ResourceType
from broker.security.acl_store import AclStore
from broker.security.credentials import CredentialStore

SECRET = "Tr0ub4dor&3-not-in-logs"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_users_add_list_delete_never_echo_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = str(tmp_path / "data")
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    status, out, err = _run(
        ["users", "add", "alice", "--data-dir", data, "--password-stdin"], capsys
    )
    assert status == 0 and "alice" in out and SECRET not in out + err
    pw_file = tmp_path / "pw"
    pw_file.write_text("other\n")
    argv = ["users", "add", "bob", "--data-dir", data, "--password-file", str(pw_file)]
    assert _run([*argv, "--mechanism", "SCRAM-SHA-512", "--iterations", "4096"], capsys)[0] == 0
    status, out, _ = _run(["users", "list", "--data-dir", data, "--format", "json"], capsys)
    assert json.loads(out) == {
        "alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"],
        "bob": ["SCRAM-SHA-512"],
    }
    store = CredentialStore(Path(data))
    assert store.check_password("alice", SECRET) and store.check_password("bob", "other")
    assert SECRET.encode() not in store.path.read_bytes()
    assert _run(["users", "delete", "alice", "--data-dir", data], capsys)[0] == 0
    assert _run(["users", "delete", "alice", "--data-dir", data], capsys)[0] == 1
    assert list(CredentialStore(Path(data)).users()) == ["bob"]


def test_users_add_refuses_few_iterations_and_bad_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = str(tmp_path / "data")
    monkeypatch.setattr("sys.stdin", io.StringIO("pw\n"))
    argv = ["users", "add", "alice", "--data-dir", data, "--password-stdin"]
    status, _, err = _run([*argv, "--iterations", "1000"], capsys)
    assert status == 1 and "iterations" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("pw\n"))
    argv = ["users", "add", "a,b", "--data-dir", data, "--password-stdin"]
    status, _, err = _run(argv, capsys)
    assert status == 1 and "invalid username" in err
    assert not (tmp_path / "data" / "scram-credentials.json").exists()


def test_acls_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    add = ["acls", "add", "--data-dir", data, "--allow-principal", "User:alice"]
    argv = [*add, "--operation", "Read", "--operation", "describe", "--topic", "orders-"]
    status, out, _ = _run([*argv, "--resource-pattern-type", "prefixed"], capsys)
    assert status == 0 and "added 2" in out
    argv = ["acls", "add", "--data-dir", data, "--deny-principal", "User:bob", "--deny-host"]
    assert _run([*argv, "10.0.0.9", "--operation", "All", "--cluster"], capsys)[0] == 0
    status, out, _ = _run(["acls", "list", "--data-dir", data, "--topic", "orders-"], capsys)
    assert out.splitlines() == [
        "Allow User:alice from * Describe on Topic:Prefixed:orders-",
        "Allow User:alice from * Read on Topic:Prefixed:orders-",
    ]
    authorizer = AclStore(Path(data)).authorizer()
    assert authorizer.authorize("User:alice", "h", Operation.READ, ResourceType.TOPIC, "orders-x")
    status, out, _ = _run(["acls", "remove", "--data-dir", data, "--principal", "User:bob"], capsys)
    assert "removed 1" in out
    status, out, _ = _run(["acls", "list", "--data-dir", data, "--format", "json"], capsys)
    assert {entry["principal"] for entry in json.loads(out)} == {"User:alice"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--allow-principal", "alice", "--operation", "Read", "--topic", "t"], "User:"),
        (["--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Operation"),
        (["--allow-principal", "User:a", "--operation", "Read"], "resource"),
        (["--allow-principal", "User:a", "--topic", "t"], "operation"),
        (["--operation", "Read", "--topic", "t"], "principal"),
    ],
)
def test_acls_add_refuses_incomplete_or_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, _, err = _run(["acls", "add", "--data-dir", str(tmp_path), *args], capsys)
    assert status == 1 and message in err
    assert AclStore(tmp_path).bindings() == []
