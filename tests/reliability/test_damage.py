"""Damaged files through the real broker (docs/reliability.md CC-07, CC-09, CC-10).

Torn tails are cut back to the last whole batch; damaged indexes are rebuilt so that
lookups agree with a brute-force scan; damage below the recovery point is fenced and
reported, never truncated away (a single broker has no replica to refetch from).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from protocol.batch import check_crc, encode_batch
from protocol.errors import CorruptMessage, StorageError
from tests.conftest import BrokerProcess, start_broker
from tests.reliability.harness import QUIET_START_SETTINGS, produce_once
from tests.reliability.oracle import Ledger, verify
from tidelog.client import Client

SETTINGS = (
    "log.segment.bytes=4096",
    "log.index.interval.bytes=256",
    "log.index.size.max.bytes=4096",
    *QUIET_START_SETTINGS,
)
TOPICS = {"damage": 1}


def fill(broker: BrokerProcess, ledger: Ledger, batches: int, *, acks: int = -1) -> None:
    rng = random.Random(batches)
    with Client(broker.bootstrap) as client:
        if "damage" not in {t["topic"] for t in client.metadata()}:
            client.create_topic("damage", 1)
        for seq in range(batches):
            produce_once(
                client,
                ledger,
                "damage",
                0,
                f"b{acks}",
                seq * 3 + len(ledger),
                acks=acks,
                records=3,
                value_bytes=100,
                rng=rng,
            )


def segments(data_dir: Path, suffix: str = ".log") -> list[Path]:
    return sorted((data_dir / "damage-0").glob(f"*{suffix}"))


def batch_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += check_crc(data, pos).size
    return starts


def restart_and_verify(data_dir: Path, ledger: Ledger, **kwargs: object) -> BrokerProcess:
    broker = start_broker(data_dir, *SETTINGS)
    with Client(broker.bootstrap) as client:
        problems = verify(client, data_dir, ledger, TOPICS, **kwargs)  # type: ignore[arg-type]
        assert not problems, "\n".join(problems[:20])
        # Produce continues at the log end, and the oracle still holds.
        fill_ledger = Ledger()
        produce_once(
            client,
            fill_ledger,
            "damage",
            0,
            "after",
            0,
            acks=-1,
            records=1,
            value_bytes=10,
            rng=random.Random(1),
        )
        ledger.record(fill_ledger.acks)
        assert not verify(client, data_dir, ledger, TOPICS, **kwargs)  # type: ignore[arg-type]
    return broker


@pytest.mark.parametrize("tear", ["garbage", "cut-inside-last-batch", "zeros"])
def test_torn_tail_is_cut_to_the_last_whole_batch(tmp_path: Path, tear: str) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_broker(data_dir, *SETTINGS)
    fill(broker, ledger, 30)
    fill(broker, ledger, 1, acks=1)  # the batch the crash tears: acks=1 only
    broker.kill()
    active = segments(data_dir)[-1]
    data = bytearray(active.read_bytes())
    last = batch_starts(active)[-1]
    rng = random.Random(3)
    if tear == "garbage":
        data += rng.randbytes(200)
    elif tear == "cut-inside-last-batch":
        del data[last + rng.randrange(1, len(data) - last) :]
    else:
        data[last + 20 :] = bytes(len(data) - last - 20) + bytes(100)
    active.write_bytes(bytes(data))
    broker = restart_and_verify(data_dir, ledger, require_acks_one=tear == "garbage")
    try:
        assert tear == "garbage" or broker.events("recovery_truncated")
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("damage", ["delete", "truncate", "zero-fill", "garble", "past-the-log"])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_broker(data_dir, *SETTINGS)
    fill(broker, ledger, 60)
    broker.kill()
    rng = random.Random(5)
    for path in segments(data_dir, ".index") + segments(data_dir, ".timeindex"):
        size = path.stat().st_size
        if damage == "delete":
            path.unlink()
        elif damage == "truncate":
            with open(path, "r+b") as f:
                f.truncate(size // 2 + 3)
        elif damage == "zero-fill":
            path.write_bytes(bytes(size))
        elif damage == "garble":
            path.write_bytes(rng.randbytes(size))
        else:  # well-formed entries pointing far past the end of the log
            entries = b"".join(
                (i + 1).to_bytes(4, "big") + (10**6 * (i + 1)).to_bytes(4, "big")
                for i in range(size // 8)
            )
            path.write_bytes(entries[:size])
    broker = restart_and_verify(data_dir, ledger)
    assert broker.stop() == 0


def test_damage_below_the_recovery_point_is_fenced_not_cut(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_broker(data_dir, *SETTINGS)
    fill(broker, ledger, 60)
    assert broker.stop() == 0  # clean: checkpoints say everything is flushed
    # A crash after that checkpoint: recovery runs, from a recovery point at the log end.
    (data_dir / ".tidelog_cleanshutdown").unlink()
    closed = segments(data_dir)[-1]
    starts = batch_starts(closed)
    data = bytearray(closed.read_bytes())
    damaged_at = starts[len(starts) // 2]
    data[damaged_at + 70] ^= 0x40  # one bit inside a record payload
    closed.write_bytes(bytes(data))
    sizes = {p.name: p.stat().st_size for p in segments(data_dir)}
    broker = start_broker(data_dir, *SETTINGS)
    try:
        assert broker.events("segment_fenced"), "damage was not reported"
        damaged_offset = int.from_bytes(data[damaged_at : damaged_at + 8], "big")
        with Client(broker.bootstrap) as client:
            with pytest.raises((CorruptMessage, StorageError)):
                client.fetch("damage", 0, damaged_offset)
            # Everything before the damage stays readable; the fenced range (from the bad
            # byte to the end of that segment) answers with an error, never other bytes.
            before = [a for a in ledger.acks if a.offset < damaged_offset]
            for ack in before[:: max(1, len(before) // 20)]:
                assert client.fetch("damage", 0, ack.offset).records
            for ack in [a for a in ledger.acks if a.offset > damaged_offset][:5]:
                with pytest.raises((CorruptMessage, StorageError)):
                    client.fetch("damage", 0, ack.offset)
            batch = encode_batch([(b"k", b"new", [], None)], now_ms=int(time.time() * 1000))
            new_offset = client.produce("damage", 0, batch, acks=-1).base_offset
            assert new_offset == ledger.acks[-1].offset + 1
            assert client.fetch("damage", 0, new_offset).records  # writes go on past the fence
        # Nothing was cut off.
        assert {p.name: p.stat().st_size for p in segments(data_dir)[: len(sizes)]} == sizes
    finally:
        assert broker.stop() == 0
