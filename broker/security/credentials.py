"""SCRAM credentials in the data directory: `tidelog users` writes them, the broker reads.

File `scram-credentials.json` (0600), one entry per user and mechanism, in SCRAM's
own stored form (protocol/sasl/scram.py): salt, iterations, StoredKey, ServerKey,
base64. No password or anything a password can be read back from is kept; the
iteration count (>= 4096, RFC 7677) makes guessing from a stolen file slow.

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": {"salt": "...",
        "iterations": 8192, "stored_key": "...", "server_key": "..."}, ...}}}

PLAIN logins are checked against the same entries (the password is derived with the
stored salt and compared with StoredKey), so one `users add` serves every mechanism.

A name with no entry must not be told apart from a real user (docs/security.md,
"User enumeration"). It gets a decoy credential derived from the name with a server
secret (RFC 5802 §9): `scram-decoy-secret.json` (0600, made on first use, kept
across restarts), so the salt it answers is the same on every exchange, one per
name and mechanism, 32 bytes as a real one. Its iteration count is that of a real
user chosen from the name by the same secret, so the counts an attacker sees for
unknown names follow the distribution of the users' own (a name's count changes
only when the set of users does, and its salt changes with it, as a user's does
when it is re-created). A PLAIN login with an unknown name runs the same PBKDF2
derivation against the decoy that a wrong password runs against the real entry.
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.security.jsonfile import Document, JsonFile
from protocol.sasl.scram import (
    DEFAULT_ITERATIONS,
    SALT_BYTES,
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramMechanism,
    derive_credential,
    password_matches,
)

CREDENTIALS_FILE = "scram-credentials.json"
DECOY_SECRET_FILE = "scram-decoy-secret.json"
FORMAT_VERSION = 1
# Random bytes of the decoy secret (an HMAC key: as long as SHA-256's output).
DECOY_SECRET_BYTES = 32
# The mechanism PLAIN checks a user with no SCRAM entry against, before any user exists.
_PLAIN_FALLBACK = "SCRAM-SHA-256"
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
        self._secret_file = JsonFile(Path(data_dir) / DECOY_SECRET_FILE, _empty_secret)
        self._secret: bytes | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}
        # What decoys imitate: per mechanism, the users' iteration counts; for PLAIN,
        # each user's (mechanism checked, iterations). One entry per user, in name order.
        self._iterations: dict[str, tuple[int, ...]] = {}
        self._plain_shapes: tuple[tuple[str, int], ...] = ()

    @property
    def path(self) -> Path:
        return self._file.path

    def refresh(self) -> None:
        """Pick up edits made by another process (cheap: one stat when nothing changed)."""
        document = self._file.load_if_changed()
        if document is not None:
            self._users = {
                user: {mech: _decode(entry) for mech, entry in mechs.items()}
                for user, mechs in sorted(document.get("users", {}).items())
            }
            self._iterations = {
                mech: tuple(e[mech].iterations for e in self._users.values() if mech in e)
                for mech in SCRAM_MECHANISMS
            }
            self._plain_shapes = tuple(
                (min(e), e[min(e)].iterations) for e in self._users.values() if e
            )

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

    def alter(self, changes: Mapping[tuple[str, str], ScramCredential | None]) -> None:
        """Set (a credential) or remove (None) several users' entries per mechanism in
        one write: what Kafka's AlterUserScramCredentials stores (a user with no entry
        left is gone)."""
        for username, _ in changes:
            check_username(username)

        def edit(document: Document) -> Document:
            users = document.setdefault("users", {})
            for (username, mechanism), credential in changes.items():
                entries = users.setdefault(username, {})
                if credential is None:
                    entries.pop(mechanism, None)
                else:
                    entries[mechanism] = _encode(credential)
                if not entries:
                    del users[username]
            return document

        self._file.update(edit)

    def entries(self) -> dict[str, dict[str, ScramCredential]]:
        """username -> mechanism -> its credential, as on disk now."""
        self.refresh()
        return {user: dict(mechs) for user, mechs in self._users.items()}

    def users(self) -> dict[str, list[str]]:
        """username -> its mechanisms, as on disk now."""
        users = self._file.load().get("users", {})
        return {user: sorted(mechs) for user, mechs in sorted(users.items())}

    def lookup(self, mechanism: str, username: str) -> ScramCredential | None:
        """The stored credential of `username` for a SCRAM mechanism, or None."""
        self.refresh()
        return self._users.get(username, {}).get(mechanism)

    def decoy(self, mechanism: str, username: str) -> ScramCredential:
        """What SCRAM answers for a name with no `mechanism` entry: stable per name, with
        the iteration count of a real user picked by the name (see the module doc)."""
        self.refresh()
        counts = self._iterations.get(mechanism, ())
        iterations = self._pick(counts, mechanism, username) if counts else DEFAULT_ITERATIONS
        return self._decoy(SCRAM_MECHANISMS[mechanism], username, iterations)

    def check_password(self, username: str, password: str) -> bool:
        """A PLAIN login: does `password` derive the user's stored SCRAM key?

        An unknown name costs the same derivation, against a decoy (never a match)."""
        self.refresh()
        entries = self._users.get(username)
        if entries:
            name = min(entries)  # any one will do: all were derived from the same password
            return password_matches(SCRAM_MECHANISMS[name], entries[name], password)
        shapes = self._plain_shapes or ((_PLAIN_FALLBACK, DEFAULT_ITERATIONS),)
        name, iterations = self._pick(shapes, "PLAIN", username)
        mechanism = SCRAM_MECHANISMS[name]
        password_matches(mechanism, self._decoy(mechanism, username, iterations), password)
        return False

    def _pick(self, choices: tuple[Any, ...], purpose: str, username: str) -> Any:
        """One of `choices`, the same for the same name while `choices` do not change."""
        digest = self._mac(f"pick\0{purpose}\0{username}", "sha256")
        return choices[int.from_bytes(digest[:8], "big") % len(choices)]

    def _decoy(self, mechanism: ScramMechanism, username: str, iterations: int) -> ScramCredential:
        def part(label: str) -> bytes:
            return self._mac(f"{label}\0{mechanism.name}\0{iterations}\0{username}", "sha512")

        size = len(mechanism.h(b""))
        return ScramCredential(
            salt=part("salt")[:SALT_BYTES],
            iterations=iterations,
            stored_key=part("stored")[:size],
            server_key=part("server")[:size],
        )

    def _mac(self, message: str, hash_name: str) -> bytes:
        return hmac.new(self._decoy_secret(), message.encode("utf-8"), hash_name).digest()

    def _decoy_secret(self) -> bytes:
        """The server secret of decoys, made once per data directory (under the file's
        lock, so a broker and a CLI starting together agree on one)."""
        if self._secret is None:
            document = self._secret_file.load()
            if not document.get("secret"):

                def edit(current: Document) -> Document:
                    if not current.get("secret"):
                        token = secrets.token_bytes(DECOY_SECRET_BYTES)
                        current["secret"] = base64.b64encode(token).decode()
                    return current

                document = self._secret_file.update(edit)
            self._secret = base64.b64decode(document["secret"])
        return self._secret


def _empty_secret() -> Document:
    return {"version": FORMAT_VERSION}
