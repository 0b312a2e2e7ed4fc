"""ACLs persisted in the data directory (`acls.json`, 0600) and applied live.

`tidelog acls add|remove` edits the file (offline, or beside a running broker); the
broker's `AclStore.authorizer()` re-reads it when it changed (one `stat` per call
otherwise, at most every `REFRESH_INTERVAL_S`), so a change applies to the next
request without a restart and survives one.

    {"version": 1, "acls": [{"principal": "User:alice", "host": "*",
        "resource_type": "Topic", "resource_name": "orders", "pattern_type": "Literal",
        "operation": "Read", "permission": "Allow"}, ...]}
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from broker.logging import get_logger
from broker.security.acl import AclBinding, AclFilter, Authorizer
from broker.security.jsonfile import Document, JsonFile

log = get_logger(component="acls")

ACLS_FILE = "acls.json"
FORMAT_VERSION = 1
# How stale the broker's view of acls.json may get: a stat per request would cost
# more than the decision itself.
REFRESH_INTERVAL_S = 1.0


def _empty() -> Document:
    return {"version": FORMAT_VERSION, "acls": []}


def _bindings(document: Document) -> list[AclBinding]:
    """The document's bindings. One that can never match (stored before AclBinding
    refused it: `User:bob `, host `localhost`) is left out, and said so: it granted or
    denied nothing, and the next edit drops it from the file."""
    found = []
    for entry in document.get("acls", []):
        try:
            found.append(AclBinding.from_json(entry))
        except ValueError as exc:
            log.warning("acl_ignored", entry=entry, reason=str(exc))
    return found


def _document(bindings: Iterable[AclBinding]) -> Document:
    return {"version": FORMAT_VERSION, "acls": [b.to_json() for b in sorted(set(bindings))]}


class AclStore:
    """The ACLs of one data directory and the `Authorizer` over them."""

    def __init__(
        self,
        data_dir: Path,
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._file = JsonFile(Path(data_dir) / ACLS_FILE, _empty)
        self._super_users = frozenset(super_users)
        self._allow_if_no_acl = allow_if_no_acl
        self._monotonic = monotonic
        self._checked = -REFRESH_INTERVAL_S
        self._authorizer = Authorizer((), super_users=self._super_users)

    @property
    def path(self) -> Path:
        return self._file.path

    def authorizer(self) -> Authorizer:
        """The current decision maker; re-reads the file if it changed (rate limited)."""
        now = self._monotonic()
        if now - self._checked >= REFRESH_INTERVAL_S:
            self._checked = now
            self._reload()
        return self._authorizer

    def _reload(self) -> None:
        document = self._file.load_if_changed()
        if document is not None:
            self._authorizer = Authorizer(
                _bindings(document),
                super_users=self._super_users,
                allow_if_no_acl=self._allow_if_no_acl,
            )

    def bindings(self, selector: AclFilter | None = None) -> list[AclBinding]:
        """The stored bindings (as on disk now) that `selector` matches, sorted."""
        found = sorted(set(_bindings(self._file.load())))
        return [b for b in found if selector is None or selector.matches(b)]

    def add(self, bindings: Iterable[AclBinding]) -> int:
        """Store `bindings` (duplicates are ignored); how many were new. Applied at once."""
        wanted = set(bindings)
        added = 0

        def edit(document: Document) -> Document:
            nonlocal added
            existing = set(_bindings(document))
            added = len(wanted - existing)
            return _document(existing | wanted)

        self._file.update(edit)
        self._checked = -REFRESH_INTERVAL_S
        return added

    def remove(self, selector: AclFilter) -> list[AclBinding]:
        """Delete every binding `selector` matches; the ones removed. Applied at once."""
        removed: list[AclBinding] = []

        def edit(document: Document) -> Document:
            existing = _bindings(document)
            removed.extend(sorted(b for b in set(existing) if selector.matches(b)))
            return _document(b for b in existing if not selector.matches(b))

        self._file.update(edit)
        self._checked = -REFRESH_INTERVAL_S
        return removed
