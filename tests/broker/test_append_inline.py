"""Which appends are validated on the event loop: decided from batch headers only."""

from __future__ import annotations

import struct
import time

import pytest

from broker.handlers.produce import INLINE_APPEND_MAX_RECORDS, append_inline
from protocol.batch import HEADER_SIZE, encode_batch
from protocol.compression import Compression

NOW = int(time.time() * 1000)


def _batch(count: int, value: bytes = b"v" * 100, **kw: object) -> bytes:
    return encode_batch([(None, value, (), None)] * count, now_ms=NOW, **kw)  # type: ignore[arg-type]


def test_a_default_producer_request_stays_inline() -> None:
    assert append_inline(_batch(1000) * 9)  # ~1 MiB: nine 1,000-record batches


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_batch(10, compression=Compression.ZSTD), id="compressed"),
        pytest.param(_batch(10, compression=Compression.GZIP), id="gzip"),
        pytest.param(_batch(INLINE_APPEND_MAX_RECORDS + 1, b""), id="too-many-records"),
        pytest.param(_batch(9000, b"v" * 200), id="over-1-MiB"),
        pytest.param(_batch(1, b"") * 17, id="too-many-batches"),
    ],
)
def test_costly_appends_go_to_a_worker(records: bytes) -> None:
    assert not append_inline(records)


def test_a_header_that_understates_its_records_goes_to_a_worker() -> None:
    honest = bytearray(_batch(3000, b""))
    # record_count is the header's last field; the payload's array still holds 3000.
    struct.pack_into(">i", honest, HEADER_SIZE - 4, 1)
    assert not append_inline(bytes(honest))
