"""Which Kafka produce batches are converted on the event loop (broker/kafka/edge.py):
priced from batch headers written by kafka-python's own record builder."""

from __future__ import annotations

import warnings

import pytest

from broker import offload
from broker.kafka.edge import to_kafka, to_tidelog
from protocol import batch as tidelog_batch
from protocol.kafka import records as kafka
from protocol.kafka.convert import CONVERT_NS_PER_RECORD, conversion_cost_ns, tally_kafka
from protocol.kafka.errors import KafkaCodecError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

# kafka-python's codec numbers: 0 none, 1 gzip.
GZIP = 1


def _batch(records: int, codec: int = 0, value: bytes = b"v") -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def convert_inline(records: bytes) -> bool:
    """The edge's choice for a produce request's batches, as `to_tidelog` makes it."""
    return offload.inline(conversion_cost_ns(tally_kafka(records)))


def test_small_uncompressed_batches_convert_inline() -> None:
    assert convert_inline(_batch(10))
    assert convert_inline(_batch(10) + _batch(20))
    assert convert_inline(_batch(2, value=b"x" * (1 << 20)))  # two records: cheap


def test_compressed_many_records_or_many_batches_go_to_a_thread() -> None:
    assert not convert_inline(_batch(10, codec=GZIP))
    assert not convert_inline(_batch(offload.INLINE_BUDGET_NS // CONVERT_NS_PER_RECORD + 1))
    assert not convert_inline(b"".join(_batch(1) for _ in range(17)))


@pytest.mark.parametrize("codec", [0, GZIP])
async def test_either_route_stores_a_whole_batch(codec: int) -> None:
    """Inline (none) or in a worker thread (gzip), a whole Tidelog batch comes out."""
    converted = await to_tidelog(_batch(100, codec=codec))
    header = tidelog_batch.check_crc(converted, 0)
    assert (header.record_count, header.compression) == (100, codec)


async def test_a_request_of_more_batches_than_priced_converts_them_all() -> None:
    """The tally stops at 16 headers; the conversion walks on from there."""
    request = b"".join(_batch(i % 3 + 1) for i in range(40))
    converted = await to_tidelog(request)
    counts = [h.record_count for _, h in tidelog_batch.iter_headers(converted)]
    assert counts == [i % 3 + 1 for i in range(40)]
    back = await to_kafka(converted)
    walk = tidelog_batch.BatchWalk(back, layout=kafka.LAYOUT)
    assert [f[kafka.LAYOUT.index["record_count"]] for _, f in walk] == counts
    assert walk.problem is None


async def test_a_damaged_batch_after_good_ones_is_corrupt_message() -> None:
    good = _batch(3)
    bad = bytearray(good)
    bad[kafka.MAGIC_OFFSET] = 7
    with pytest.raises(KafkaCodecError, match="magic"):
        await to_tidelog(good + bytes(bad))
    with pytest.raises(KafkaCodecError, match="needs 61 bytes"):
        await to_tidelog(good + good[:20])
