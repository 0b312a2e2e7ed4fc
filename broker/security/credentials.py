"""SCRAM credentials in the data directory: `tidelog users` writes them, the broker reads.

File `scram-credentials.json` (0600), one entry per user and mechanism, in SCRAM's
own stored form (protocol/sasl/scram.py): salt, iterations, StoredKey, ServerKey,
base64. No password or anything a password can be read back from is kept; the
iteration count (>= 4096, RFC 7677) makes guessing from a stolen file slow.

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": {"salt": "...",
        "iterations": 8192, "stored_key": "...", "server_key": "..."}, ...}}}

PLAIN logins are checked against the same entries (the password is derived with the
stored salt and compared with StoredKey), so one `users add` serves every mechanism.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from broker.security.jsonfile import Document, JsonFile
from protocol.sasl.scram import (
    DEFAULT_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    derive_credential,
    password_matches,
)

CREDENTIALS_FILE = "scram-credentials.json"
FORMAT_VERSION = 1
# Kafka's SCRAM usernames are free text; ours also name principals ("User:<name>") in
# ACLs and logs, so keep them printable and bounded.
USERNAME_RE = re.compile(r"[A-Za-z0-9._@-]{1,255}")


def _empty() -> Document:
    return {"version": FORMAT_VERSION, "users": {}}


def check_username(name: str) -> str:
    """`name` if it is a valid username, else ValueError saying what is allowed."""
    if not USERNAME_RE.fullmatch(name):
        raise ValueError(f"invalid username {name!r}: use 1-255 of A-Z a-z 0-9 . _ @ -")
    return name


def _encode(credential: ScramCredential) -> dict[str, Any]:
    return {
        "salt": base64.b64encode(credential.salt).decode(),
        "iterations": credential.iterations,
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
    }


def _decode(entry: dict[str, Any]) -> ScramCredential:
    return ScramCredential(
        salt=base64.b64decode(entry["salt"]),
        iterations=int(entry["iterations"]),
        stored_key=base64.b64decode(entry["stored_key"]),
        server_key=base64.b64decode(entry["server_key"]),
    )


class CredentialStore:
    """The users of one data directory. `lookup` re-reads the file when it changed."""

    def __init__(self, data_dir: Path) -> None:
        self._file = JsonFile(Path(data_dir) / CREDENTIALS_FILE, _empty)
        self._users: dict[str, dict[str, ScramCredential]] = {}

    @property
    def path(self) -> Path:
        return self._file.path

    def refresh(self) -> None:
        """Pick up edits made by another process (cheap: one stat when nothing changed)."""
        document = self._file.load_if_changed()
        if document is not None:
            self._users = {
                user: {mech: _decode(entry) for mech, entry in mechs.items()}
                for user, mechs in document.get("users", {}).items()
            }

    def set_user(
        self,
        username: str,
        password: str,
        *,
        mechanisms: tuple[str, ...] = tuple(SCRAM_MECHANISMS),
        iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        """Create or replace a user's credentials (a fresh salt per mechanism)."""
        check_username(username)
        if not password:
            raise ValueError("empty password")
        entries = {
            name: _encode(
                derive_credential(SCRAM_MECHANISMS[name], password, iterations=iterations)
            )
            for name in mechanisms
        }

        def edit(document: Document) -> Document:
            document.setdefault("users", {})[username] = entries
            return document

        self._file.update(edit)

    def delete_user(self, username: str) -> bool:
        """Remove a user; False if there was none."""
        found = False

        def edit(document: Document) -> Document:
            nonlocal found
            found = document.setdefault("users", {}).pop(username, None) is not None
            return document

        self._file.update(edit)
        return found

    def users(self) -> dict[str, list[str]]:
        """username -> its mechanisms, as on disk now."""
        users = self._file.load().get("users", {})
        return {user: sorted(mechs) for user, mechs in sorted(users.items())}

    def lookup(self, mechanism: str, username: str) -> ScramCredential | None:
        """The stored credential of `username` for a SCRAM mechanism, or None."""
        self.refresh()
        return self._users.get(username, {}).get(mechanism)

    def check_password(self, username: str, password: str) -> bool:
        """A PLAIN login: does `password` derive the user's stored SCRAM key?"""
        self.refresh()
        entries = self._users.get(username)
        if not entries:
            return False
        name = min(entries)  # any one will do: all were derived from the same password
        return password_matches(SCRAM_MECHANISMS[name], entries[name], password)
