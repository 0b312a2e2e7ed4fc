"""kafka-python 3's protocol classes, by API key: a codec nobody here wrote.

kafka-python builds its classes from Kafka's JSON schemas with its own code, and
names fields as we do (snake_case of the schema's names), so its decoded objects
compare with our dicts directly.
"""

from __future__ import annotations

import warnings

# kafka-python 3.0 loads its bundled schemas with importlib.resources.read_text,
# deprecated in Python 3.11; the suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl
    from kafka.protocol.api_message import ApiMessage


def _classes() -> dict[tuple[int, bool], type[ApiMessage]]:
    out: dict[tuple[int, bool], type[ApiMessage]] = {}
    for module in (
        kafka.protocol.admin,
        kafka.protocol.consumer,
        kafka.protocol.metadata,
        kafka.protocol.producer,
        kafka.protocol.sasl,
    ):
        for name in dir(module):
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage:
                out[(obj.API_KEY, obj.is_request())] = obj
    return out


CLASSES = _classes()


def kp_class(api_key: int, request: bool) -> type[ApiMessage]:
    return CLASSES[(api_key, request)]


def values(message: object, version: int) -> list:
    """A kafka-python message as nested lists of its field values, in schema order.

    Compared by position, not name: kafka-python renames a few fields (Metadata's
    `cluster_authorized_operations` is its `authorized_operations`).
    """
    return [
        _value(getattr(message, f.name), version) for f in message._struct.untagged_fields(version)
    ]


def _value(value: object, version: int) -> object:
    if hasattr(value, "_struct"):
        return values(value, version)
    if isinstance(value, (list, tuple)):
        return [_value(v, version) for v in value]
    if type(value).__name__ == "UUID":
        return value.bytes
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (set, frozenset)):
        # kafka-python reads authorized-operations bit fields as sets of bit numbers.
        return sum(1 << bit for bit in value) - (1 << 32 if 31 in value else 0)
    return value
