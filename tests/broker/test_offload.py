"""The one offload policy (broker/offload.py): what runs on the event loop, priced by
the cost models beside what they price, and the one limiter every worker borrows."""

from __future__ import annotations

import struct
import threading
import time

import pytest
import trio

from broker import offload
from protocol.batch import (
    HEADER_SIZE,
    UNPRICED_NS,
    VALIDATE_NS_PER_RECORD,
    append_cost_ns,
    encode_batch,
)
from protocol.compression import Compression

NOW = int(time.time() * 1000)


def _batch(count: int, value: bytes = b"v" * 100, **kw: object) -> bytes:
    return encode_batch([(None, value, (), None)] * count, now_ms=NOW, **kw)  # type: ignore[arg-type]


def test_a_default_producer_request_is_validated_inline() -> None:
    assert offload.inline(append_cost_ns(_batch(1000) * 9))  # ~1 MiB: nine 1,000-record batches


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_batch(10, compression=Compression.ZSTD), id="compressed"),
        pytest.param(_batch(10, compression=Compression.GZIP), id="gzip"),
        pytest.param(
            _batch(offload.INLINE_BUDGET_NS // VALIDATE_NS_PER_RECORD + 1, b""),
            id="too-many-records",
        ),
        pytest.param(_batch(9000, b"v" * 200), id="over-1-MiB"),
        pytest.param(_batch(1, b"") * 17, id="too-many-batches-to-price"),
    ],
)
def test_costly_appends_go_to_a_worker(records: bytes) -> None:
    assert not offload.inline(append_cost_ns(records))


def test_a_header_that_understates_its_records_is_unpriced() -> None:
    honest = bytearray(_batch(3000, b""))
    # record_count is the header's last field; the payload's array still holds 3000.
    struct.pack_into(">i", honest, HEADER_SIZE - 4, 1)
    assert append_cost_ns(bytes(honest)) == UNPRICED_NS


def test_bytes_that_are_no_batch_cost_nothing_to_refuse() -> None:
    assert offload.inline(append_cost_ns(b"\x00" * (4 << 20)))


async def test_run_keeps_cheap_work_on_the_loop_and_sends_dear_work_to_a_worker() -> None:
    loop_thread = threading.get_ident()
    assert await offload.run(0, threading.get_ident) == loop_thread
    assert await offload.run(UNPRICED_NS, threading.get_ident) != loop_thread


async def test_every_worker_borrows_the_one_limiter() -> None:
    limiter = offload.limiter()
    assert limiter is offload.limiter()
    assert limiter.total_tokens == offload.WORKER_THREADS
    limiter.total_tokens = 1
    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(10)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(offload.to_worker, hold)
        await trio.to_thread.run_sync(entered.wait, 10)  # trio's own limiter: not ours
        assert limiter.borrowed_tokens == 1
        with trio.move_on_after(0.2) as waited:
            await offload.to_worker(lambda: None)  # the only token is held
        assert waited.cancelled_caught
        release.set()
    assert limiter.borrowed_tokens == 0
