"""Coverage-guided fuzzing of Tidelog's decoders with atheris (outside CI, minutes to hours).

    pip install atheris
    python fuzz/atheris_decoders.py fuzz/corpus -max_total_time=3600

The targets are the ones the hypothesis tests run in CI (fuzz/targets.py), so a
crash found here is replayed there by adding the decoded input as an `@example`. A
small integer drawn from the input picks the target; the rest of the input is its data.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports():
    from fuzz import targets

SCRATCH = Path(tempfile.mkdtemp(prefix="tidelog-fuzz-"))
API_NAMES = ("produce", "fetch", "metadata", "list_offsets", "offset_for_time", "create_topic")


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    choice = fdp.ConsumeIntInRange(0, 5)
    if choice == 0:
        targets.fuzz_frames(fdp.ConsumeBytes(fdp.remaining_bytes()), 1 + len(data) % 61)
    elif choice == 1:
        targets.fuzz_envelope(fdp.ConsumeBytes(fdp.remaining_bytes()))
    elif choice == 2:
        targets.fuzz_batch(fdp.ConsumeBytes(fdp.remaining_bytes()), fdp.ConsumeBool())
    elif choice == 3:
        targets.fuzz_checkpoint(fdp.ConsumeBytes(fdp.remaining_bytes()))
    elif choice == 4:
        size, probe = fdp.ConsumeIntInRange(0, 1 << 16), fdp.ConsumeIntInRange(-5, 1 << 16)
        targets.fuzz_index(SCRATCH, fdp.ConsumeBytes(fdp.remaining_bytes()), size, probe)
    else:
        import msgpack

        try:
            body = msgpack.unpackb(fdp.ConsumeBytes(fdp.remaining_bytes()), raw=False)
        except Exception:
            return
        targets.fuzz_request_body(API_NAMES[len(data) % len(API_NAMES)], body)


def main() -> None:
    # Seeds go into the corpus directory libFuzzer is given (the first non-flag
    # argument), so the run starts from valid inputs; fuzz/corpus by default.
    dirs = [arg for arg in sys.argv[1:] if not arg.startswith("-")]
    seeds = Path(dirs[0]) if dirs else ROOT / "fuzz" / "corpus"
    if not dirs:
        sys.argv.append(str(seeds))
    seeds.mkdir(parents=True, exist_ok=True)
    for name, seed in (
        ("frame", b"\x00" + targets.VALID_FRAME),
        ("batch", b"\x02" + targets.VALID_BATCH),
        ("checkpoint", b"\x03" + targets.VALID_CHECKPOINT),
    ):
        (seeds / f"seed-{name}").write_bytes(seed)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
