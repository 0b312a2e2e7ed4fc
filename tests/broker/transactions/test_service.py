"""The transaction coordinator's driver (broker/transactions/service.py) over a real
LogManager and a real `__transaction_state` on disk, with a clock the test moves:
timeouts, id expiration, the KIP-890 verifier, and a restart (a second service over
the same data directory) finding pending TxnOffsetCommits and an open transaction."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.groupcommit import GroupCommitter
from broker.groups.messages import OffsetCommitRequest
from broker.longpoll import AppendNotifier
from broker.metrics import BrokerMetrics
from broker.transactions import records as rec
from broker.transactions.service import TransactionService
from broker.transactions.state import TxnState
from broker.transactions.state_log import StateLog
from protocol.kafka.errors import KafkaError as E
from storage.manager import LogManager

TIMEOUT_MS = 5_000


@dataclass
class MovableClock:
    offset_ms: int = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


@pytest.fixture
async def env(
    tmp_path: Path, nursery: trio.Nursery
) -> AsyncIterator[tuple[BrokerContext, MovableClock]]:
    clock = MovableClock()
    config = BrokerConfig.from_props(
        {"transactional.id.expiration.ms": 60_000}, data_dir=tmp_path / "data"
    )
    manager = LogManager(config.data_dir, config.log_config, clock_ms=clock)
    manager.open()
    manager.create_topic("t", 2, {})
    ctx = BrokerContext(
        config=config,
        manager=manager,
        notifier=AppendNotifier(),
        committer=GroupCommitter(nursery),
        metrics=BrokerMetrics("test"),
        clock_ms=clock,
    )
    await ctx.transactions.load()
    yield ctx, clock
    manager.close()


def _restarted(ctx: BrokerContext) -> TransactionService:
    """A second coordinator over the same data directory (what a restart loads)."""
    return TransactionService(ctx.config.txn_config, ctx.manager, ctx.groups, ctx.clock_ms)


async def test_a_timed_out_transaction_is_aborted_with_the_epoch_bumped(
    env: tuple[BrokerContext, MovableClock],
) -> None:
    ctx, clock = env
    service = ctx.transactions
    init = await service.init_producer_id("slow", TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await service.add_partitions("slow", pid, epoch, [("t", 0), ("t", 1)]) is E.NONE
    ends = [ctx.manager.get_log("t", p).log_end_offset for p in (0, 1)]
    clock.offset_ms += TIMEOUT_MS - 1_000
    await service.abort_timed_out()
    assert service.describe("slow").state is TxnState.ONGOING  # not yet
    clock.offset_ms += 2_000
    await service.abort_timed_out()
    meta = service.describe("slow")
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
    assert [ctx.manager.get_log("t", p).log_end_offset for p in (0, 1)] == [e + 1 for e in ends]
    assert service.timed_out == service.aborted == 1
    # the producer that opened it is fenced now
    assert await service.end_txn("slow", pid, epoch, commit=True) is E.PRODUCER_FENCED
    assert await service.add_partitions("slow", pid, epoch, [("t", 0)]) is E.PRODUCER_FENCED


async def test_an_idle_id_expires_and_stays_forgotten_after_a_restart(
    env: tuple[BrokerContext, MovableClock],
) -> None:
    ctx, clock = env
    service = ctx.transactions
    await service.init_producer_id("idle", TIMEOUT_MS)
    busy = await service.init_producer_id("busy", TIMEOUT_MS)
    await service.add_partitions("busy", busy.producer_id, busy.producer_epoch, [("t", 0)])
    clock.offset_ms += 61_000
    await service.remove_expired()
    assert service.describe("idle") is None
    assert service.describe("busy") is not None  # an open transaction never expires
    again = _restarted(ctx)
    await again.load()
    assert again.describe("idle") is None
    assert again.describe("busy").state is TxnState.ONGOING


async def test_the_verifier_accepts_only_partitions_of_the_open_transaction(
    env: tuple[BrokerContext, MovableClock],
) -> None:
    ctx, _ = env
    service = ctx.transactions
    verify = ctx.manager.txn_verifier
    assert verify is not None
    init = await service.init_producer_id("v", TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    assert verify("v", pid, epoch, "t", 0) == "INVALID_TXN_STATE"
    await service.add_partitions("v", pid, epoch, [("t", 0)])
    assert verify("v", pid, epoch, "t", 0) is None
    assert verify("v", pid, epoch, "t", 1) == "INVALID_TXN_STATE"
    assert verify("v", pid, epoch + 1, "t", 0) == "PRODUCER_FENCED"
    assert verify("nobody", pid, epoch, "t", 0) == "INVALID_PRODUCER_ID_MAPPING"


@pytest.mark.parametrize("commit", [True, False])
async def test_pending_offsets_survive_a_restart_then_follow_the_result(
    env: tuple[BrokerContext, MovableClock], commit: bool
) -> None:
    ctx, _ = env
    service = ctx.transactions
    init = await service.init_producer_id("eos", TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    await service.add_partitions("eos", pid, epoch, [("t", 0)])
    assert await service.add_offsets("eos", pid, epoch, "g") is E.NONE
    request = OffsetCommitRequest(group_id="g", offsets={("t", 1): (17, "meta")})
    assert await service.txn_offset_commit("eos", pid, epoch, request) is E.NONE
    assert service.has_pending_offset("g", ("t", 1))
    assert await ctx.groups.query(lambda c: c.fetch_offsets("g")) == {}

    again = _restarted(ctx)
    await again.load()
    assert again.has_pending_offset("g", ("t", 1))
    assert await again.end_txn("eos", pid, epoch, commit=commit) is E.NONE
    assert not again.has_pending_offset("g", ("t", 1))
    committed = await ctx.groups.query(lambda c: c.fetch_offsets("g"))
    if commit:
        assert (committed[("t", 1)].offset, committed[("t", 1)].metadata) == (17, "meta")
    else:
        assert committed == {}
    third = _restarted(ctx)
    await third.load()  # the tombstones: nothing pending after the next restart either
    assert not third.has_pending_offset("g", ("t", 1))


async def test_txn_offset_commit_needs_the_group_added_and_the_current_epoch(
    env: tuple[BrokerContext, MovableClock],
) -> None:
    ctx, _ = env
    service = ctx.transactions
    init = await service.init_producer_id("strict", TIMEOUT_MS)
    pid, epoch = init.producer_id, init.producer_epoch
    request = OffsetCommitRequest(group_id="g", offsets={("t", 0): (1, "")})
    await service.add_partitions("strict", pid, epoch, [("t", 0)])
    assert await service.txn_offset_commit("strict", pid, epoch, request) is E.INVALID_TXN_STATE
    await service.add_offsets("strict", pid, epoch, "g")
    stale = await service.txn_offset_commit("strict", pid, epoch - 1, request)
    assert stale is E.INVALID_PRODUCER_EPOCH
    unknown_member = OffsetCommitRequest(
        group_id="g", offsets={("t", 0): (1, "")}, member_id="ghost", generation_id=3
    )
    answer = await service.txn_offset_commit("strict", pid, epoch, unknown_member)
    assert answer is E.NONE  # no such group yet: Kafka's doTxnCommitOffsets accepts


async def test_the_log_holds_kafkas_transaction_log_records(
    env: tuple[BrokerContext, MovableClock],
) -> None:
    ctx, _ = env
    init = await ctx.transactions.init_producer_id("fmt", TIMEOUT_MS)
    read = StateLog(ctx.manager, 1 << 20).read_all()
    key, value = read.records[-1]
    assert key == b"\x00\x00\x00\x03fmt"  # int16 version 0, int16 length, the id
    assert value is not None
    assert value[:2] == b"\x00\x00"  # value version 0
    meta = rec.decode_value("fmt", value)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (
        init.producer_id,
        init.producer_epoch,
        TxnState.EMPTY,
    )
    assert meta.timeout_ms == TIMEOUT_MS
