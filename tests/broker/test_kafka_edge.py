"""The Kafka edge (broker/kafka/edge.py) over batches written by kafka-python's own
record builder: produced batches are priced and stored as sent, a fetch answer of
Kafka batches goes out as it is, Tidelog batches in it are converted."""

from __future__ import annotations

import warnings

import pytest

from broker import offload
from broker.kafka.edge import check_batch_sizes, to_kafka
from protocol import batch as tidelog_batch
from protocol.batch import KAFKA_LAYOUT, append_cost_ns, encode_batch
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka.errors import KafkaCodecError, KafkaError

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

# kafka-python's codec numbers: 0 none, 1 gzip.
GZIP = 1


def _batch(records: int, codec: int = 0, value: bytes = b"v", base: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    out = bytearray(builder.build())
    tidelog_batch.set_base_offset(out, 0, base)
    return bytes(out)


def check_inline(records: bytes) -> bool:
    """The produce handler's choice for a Kafka produce request's batches."""
    return offload.inline(append_cost_ns(records, layout=KAFKA_LAYOUT))


def test_small_uncompressed_batches_are_checked_inline() -> None:
    assert check_inline(_batch(10))
    assert check_inline(_batch(10) + _batch(20))
    assert check_inline(_batch(2, value=b"x" * (1 << 20)))  # two records: cheap


def test_compressed_many_records_or_many_batches_go_to_a_thread() -> None:
    assert not check_inline(_batch(10, codec=GZIP))
    many = offload.INLINE_BUDGET_NS // tidelog_batch.KAFKA_CHECK_NS_PER_RECORD + 1
    assert not check_inline(_batch(many))
    assert not check_inline(b"".join(_batch(1) for _ in range(17)))


def test_a_batch_over_max_message_bytes_is_refused_as_sent() -> None:
    check_batch_sizes(_batch(3), 1 << 20)
    big = _batch(3, value=b"x" * 2000)
    with pytest.raises(KafkaCodecError) as raised:
        check_batch_sizes(_batch(1) + big, 1000)
    assert raised.value.error is KafkaError.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", [0, GZIP])
async def test_kafka_batches_go_out_as_they_are(codec: int) -> None:
    stored = _batch(100, codec=codec) + _batch(3, base=100)
    assert await to_kafka(stored) is stored


async def test_only_the_tidelog_batches_of_an_answer_are_converted() -> None:
    first, last = _batch(2), _batch(2, base=5)
    tidelog = encode_batch([(b"k", b"v", None, 1_000 + i) for i in range(3)], base_offset=2)
    sent = await to_kafka(first + tidelog + last)
    assert isinstance(sent, bytes)
    walk = tidelog_batch.BatchWalk(sent, layout=kafka.LAYOUT)
    got = [(pos, f[kafka.LAYOUT.index["base_offset"]]) for pos, f in walk]
    assert walk.problem is None
    assert [base for _, base in got] == [0, 2, 5]
    assert sent[: len(first)] == first and sent[-len(last) :] == last


async def test_a_damaged_batch_after_good_ones_is_corrupt_message() -> None:
    good = encode_batch([(None, b"v", None, 1)])
    bad = bytearray(good)
    bad[tidelog_batch.MAGIC_OFFSET] = 7
    with pytest.raises(CorruptMessage, match="magic"):
        await to_kafka(_batch(1) + good + bytes(bad))
