"""Hypothesis fuzzing of every decoder that meets bytes from outside (docs/reliability.md BI-01).

Each decoder gets arbitrary bytes (and mutations of valid inputs, which reach deeper)
and may only return a value or raise the project's own error type for that input:
`TidelogError` for frames, envelopes, bodies and batches; `CheckpointFormatError` for
checkpoints; `CorruptIndexError` for index files. Anything else escaping (a bare
msgpack `ExtraData`, `struct.error`, `IndexError`, `RecursionError`, ...) is a bug.
The atheris harness in `fuzz/` runs the same targets for hours outside CI.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fuzz.targets import (
    VALID_BATCH,
    VALID_CHECKPOINT,
    VALID_FRAME,
    fuzz_batch,
    fuzz_checkpoint,
    fuzz_envelope,
    fuzz_frames,
    fuzz_index,
    fuzz_request_body,
)

# Modest in CI (2 cores, whole suite < 20 min); `make soak` raises it, atheris goes further.
FUZZ_EXAMPLES = int(os.environ.get("TIDELOG_SOAK_FUZZ_EXAMPLES", "300"))
pytestmark = pytest.mark.timeout(max(120, FUZZ_EXAMPLES // 10))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """`seed` with a few bytes flipped, cut or inserted: reaches past the first check."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@FUZZ
@given(st.one_of(st.binary(max_size=512), mutated(VALID_FRAME)), st.integers(1, 64))
@example(b"\xff\xff\xff\xff", 4)
@example(b"\x00\x00\x00\x01\xc1", 5)
def test_frame_decoder(data: bytes, chunk: int) -> None:
    fuzz_frames(data, chunk)


@FUZZ
@given(st.one_of(st.binary(max_size=512), mutated(VALID_FRAME[4:])))
@example(b"\x91" * 5000 + b"\xc0")  # nesting bomb
@example(msgpack.packb({"api": "fetch", "v": True, "id": 1, "body": {}}))
@example(msgpack.packb({"api": "fetch", "v": 1, "id": 2**64 - 1, "body": {}}))
def test_envelope_decoder(data: bytes) -> None:
    fuzz_envelope(data)


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(
    st.sampled_from(
        [
            "produce",
            "fetch",
            "metadata",
            "list_offsets",
            "offset_for_time",
            "create_topic",
            "alter_configs",
            "delete_records",
            "describe_configs",
            "delete_topic",
        ]
    ),
    st.dictionaries(
        st.sampled_from(
            [
                "topics",
                "topic",
                "acks",
                "partitions",
                "offset",
                "max_bytes",
                "set",
                "configs",
                "timeout_ms",
                "max_wait_ms",
                "delete",
                "spec",
            ]
        ),
        JSONISH,
        max_size=4,
    ),
)
def test_request_body_validation(api: str, body: dict) -> None:
    fuzz_request_body(api, body)


@FUZZ
@given(st.one_of(st.binary(max_size=600), mutated(VALID_BATCH)), st.booleans())
def test_batch_decoder(data: bytes, producer: bool) -> None:
    fuzz_batch(data, producer)


@FUZZ
@given(st.one_of(st.binary(max_size=200), mutated(VALID_CHECKPOINT)))
@example(b"0\n1\nt 0 5 extra\n")
@example(b"0\n-1\n")
def test_checkpoint_decoder(data: bytes) -> None:
    fuzz_checkpoint(data)


@FUZZ
@given(st.binary(max_size=256), st.integers(0, 4096), st.integers(-5, 300))
def test_index_files(tmp_path_factory: object, data: bytes, log_size: int, probe: int) -> None:
    directory = Path(tmp_path_factory.mktemp("index"))  # type: ignore[attr-defined]
    fuzz_index(directory, data, log_size, probe)
