"""The two batch layouts a compacted log may hold, as the cleaner reads them.

Storage keeps Kafka-produced batches as Kafka v2 batches beside Tidelog's own
(docs/protocol.md §3); its header walk gives both as the same raw header tuple, and
the magic says which layout a batch is. Only the records differ: msgpack against
Kafka's varints. This module decodes either, so the map pass, the recopy and the
rebuild stay one code path (`recopy._rebuild` writes a batch back in its own layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compaction.keys import decode_keys
from compaction.mapping import MapBuilder
from protocol.batch import ANY_LAYOUT, COMPRESSION_MASK, BatchHeader, decode_payload, read_header
from protocol.kafka import stored

__all__ = ["add_to_map", "header_of", "records_of"]


def records_of(view: memoryview, header: BatchHeader, max_decompressed: int) -> Sequence[Any]:
    """The raw record tuples `(offset_delta, timestamp_delta, key, value, headers)` of
    the whole batch in `view`, whatever its layout."""
    if stored.is_kafka(header):
        return stored.decode_stored(view, 0, header, max_decompressed=max_decompressed)
    return decode_payload(view, header=header, max_decompressed=max_decompressed)[1]


def add_to_map(
    builder: MapBuilder, view: memoryview, fields: tuple[int, ...], max_decompressed: int
) -> bool:
    """Feed one batch's keys to the map (`MapBuilder.add_records`); False when full."""
    header = BatchHeader(*fields)
    if stored.is_kafka(header):
        deltas, keys = stored.keys_of_stored(view, 0, header, max_decompressed=max_decompressed)
        return builder.add_keys(header.base_offset, header.last_offset, deltas, keys)
    records = decode_keys(
        view,
        compression=header.attributes & COMPRESSION_MASK,
        base_offset=header.base_offset,
        max_decompressed=max_decompressed,
    )
    return builder.add_records(header.base_offset, header.last_offset, records)


def header_of(batch: bytes | memoryview, magic: int) -> BatchHeader:
    """The header of a batch the recopy built in the layout of `magic` (its original's)."""
    if magic == stored.MAGIC:
        return BatchHeader(*ANY_LAYOUT.unpack_from(batch))
    return read_header(batch)
