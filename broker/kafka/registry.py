"""Every Kafka API Tidelog serves: the family modules' `HANDLERS`, joined.

Add a family module by importing it here and listing it in `_FAMILIES`; an API
key served by two modules is a programming error caught at import.
"""

from __future__ import annotations

from types import ModuleType

from broker.kafka import admin, core, groups, producer_ids, security
from broker.kafka.call import KafkaHandler

_FAMILIES: tuple[ModuleType, ...] = (core, admin, groups, producer_ids, security)


def _join(families: tuple[ModuleType, ...]) -> dict[int, KafkaHandler]:
    joined: dict[int, KafkaHandler] = {}
    for module in families:
        for key, handler in module.HANDLERS.items():
            if key in joined:
                raise RuntimeError(f"Kafka API key {key} served twice ({module.__name__})")
            joined[key] = handler
    return joined


KAFKA_HANDLERS: dict[int, KafkaHandler] = _join(_FAMILIES)
