"""Fuzz targets shared by the hypothesis tests (tests/fuzz, CI) and the atheris harness (hours).

Each target feeds one decoder and lets only that decoder's own error type through;
anything else propagates and is reported as a crash by either fuzzer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from protocol.batch import decode_records, encode_batch, iter_headers, validate_batch
from protocol.envelope import parse_request
from protocol.errors import TidelogError
from protocol.framing import FrameDecoder, decode_body, encode_frame
from protocol.schemas import validate_request, validate_request_body
from storage.checkpoint import CheckpointFormatError, decode_checkpoint, encode_checkpoint
from storage.fileio import FileIO
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex

# Frame limit of the fuzzed decoder: small, so oversize headers are common.
FUZZ_MAX_FRAME_BYTES = 1 << 20
# Decompression cap while fuzzing: a bomb must stop here, not exhaust memory.
FUZZ_MAX_DECOMPRESSED_BYTES = 1 << 20
# Base offset of fuzzed index files (lookups below it must not go negative).
INDEX_BASE_OFFSET = 100

VALID_BATCH = encode_batch(
    [(b"key", b"value", [("h", b"x")], 1_700_000_000_000), (None, None, [], 1_700_000_000_001)],
    now_ms=1_700_000_000_000,
)
VALID_FRAME = encode_frame(
    {
        "api": "produce",
        "v": 1,
        "id": 7,
        "body": {
            "acks": -1,
            "timeout_ms": 1000,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": VALID_BATCH}]}],
        },
    }
)
VALID_CHECKPOINT = encode_checkpoint({("t", 0): 5, ("u.v", 3): 12})


def fuzz_frames(data: bytes, chunk: int) -> list[Any]:
    """Feed `data` in `chunk`-sized pieces; stop at the first frame error, as the broker does."""
    decoder = FrameDecoder(FUZZ_MAX_FRAME_BYTES)
    messages = []
    try:
        for start in range(0, len(data), max(chunk, 1)):
            decoder.feed(data[start : start + chunk])
            while True:
                complete, obj = decoder.next_message()
                if not complete:
                    break
                messages.append(obj)
    except TidelogError:
        pass
    return messages


def fuzz_envelope(data: bytes) -> None:
    """Body bytes -> msgpack object -> request envelope -> validated body."""
    try:
        request = parse_request(decode_body(data))
        validate_request(request)
    except TidelogError:
        pass


def fuzz_request_body(api: str, body: Any) -> None:
    try:
        validate_request_body(api, body)
    except TidelogError:
        pass


def fuzz_batch(data: bytes, producer: bool) -> None:
    """One batch through full validation, then every header and record of the buffer."""
    try:
        validate_batch(data, producer=producer, max_decompressed=FUZZ_MAX_DECOMPRESSED_BYTES)
        decode_records(data, max_decompressed=FUZZ_MAX_DECOMPRESSED_BYTES)
    except TidelogError:
        pass
    try:
        for _ in iter_headers(data, allow_partial=True):
            pass
    except TidelogError:
        pass


def fuzz_checkpoint(data: bytes) -> None:
    try:
        entries = decode_checkpoint(data)
    except CheckpointFormatError:
        return
    assert decode_checkpoint(encode_checkpoint(entries)) == entries


def fuzz_index(directory: Path, data: bytes, log_size: int, probe: int) -> None:
    """An index file holding `data`: sanity_check rejects it or lookups stay in range."""
    io = FileIO()
    for cls, name in ((OffsetIndex, "offset.index"), (TimeIndex, "time.timeindex")):
        path = directory / f"{time.monotonic_ns()}.{name}"
        path.write_bytes(data)
        index = cls(path, INDEX_BASE_OFFSET, io)
        try:
            if isinstance(index, OffsetIndex):
                index.sanity_check(log_size)
                offset, position = index.lookup(INDEX_BASE_OFFSET + probe)
                assert offset >= INDEX_BASE_OFFSET and 0 <= position <= log_size
            else:
                index.sanity_check(INDEX_BASE_OFFSET + log_size)
                _, offset = index.lookup(probe)
                assert offset >= INDEX_BASE_OFFSET
        except CorruptIndexError:
            pass
        finally:
            index.close()
