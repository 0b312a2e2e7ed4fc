"""The client quotas of one data directory: `client-quotas.json`, what AlterClientQuotas writes.

An entity is what Kafka names one: a user, a client id, or both, each a name or the
default (null), e.g. `{"user": "alice", "client-id": null}` is alice's default
client. Each holds quota keys and their values. The broker is the only writer (the
Kafka admin API), so the file is read once at start and rewritten on each change
(`JsonFile`: owner-only, atomic, under a lock), as the ACLs are.

    {"version": 1, "entities": [{"entity": {"user": "alice"},
        "quotas": {"producer_byte_rate": 1048576.0}}]}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from broker.security.jsonfile import Document, JsonFile

QUOTAS_FILE = "client-quotas.json"
FORMAT_VERSION = 1
USER, CLIENT_ID = "user", "client-id"
# The quota keys Tidelog enforces (Kafka's QuotaConfig.userAndClientQuotaConfigs less
# controller_mutation_rate: Tidelog's topic changes are not throttled).
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
# key -> whether its value must be a whole number (Kafka's LONG keys).
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
}

# An entity: its (type, name or None for the default) pairs, sorted by type.
Entity = tuple[tuple[str, str | None], ...]


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs))


def _empty() -> Document:
    return {"version": FORMAT_VERSION, "entities": []}


class QuotaStore:
    """Every entity's quotas, in memory, and the file they are kept in."""

    def __init__(self, data_dir: Path) -> None:
        self._file = JsonFile(Path(data_dir) / QUOTAS_FILE, _empty)
        self._entities: dict[Entity, dict[str, float]] = {}
        for item in self._file.load().get("entities", []):
            entity = entity_of(item["entity"].items())
            self._entities[entity] = {k: float(v) for k, v in item["quotas"].items()}

    @property
    def path(self) -> Path:
        return self._file.path

    def __bool__(self) -> bool:
        return bool(self._entities)

    def get(self, entity: Entity) -> Mapping[str, float]:
        return self._entities.get(entity, {})

    def entities(self) -> dict[Entity, dict[str, float]]:
        return {e: dict(q) for e, q in self._entities.items()}

    def apply(self, changes: Mapping[Entity, Mapping[str, float | None]]) -> None:
        """Set (a value) or remove (None) keys of several entities, then store them all."""
        entities = {e: dict(q) for e, q in self._entities.items()}
        for entity, ops in changes.items():
            quotas = entities.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    quotas.pop(key, None)
                else:
                    quotas[key] = value
            if not quotas:
                del entities[entity]

        def edit(document: Document) -> Document:
            document["entities"] = [
                {"entity": dict(entity), "quotas": quotas}
                for entity, quotas in sorted(entities.items(), key=lambda i: repr(i[0]))
            ]
            return document

        self._file.update(edit)
        self._entities = entities
