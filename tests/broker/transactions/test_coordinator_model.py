"""Model-based test of the transaction coordinator's rules, across restarts and crashes.

A driver plays the broker's service over the pure `TxnCoordinator`: each `Write` is
encoded in Kafka's TransactionLog format and appended to an in-memory log (decoded
again at every restart, so the record format is part of what is tested), then
applied; a Prepare* is followed by its markers (recorded as outcomes) and the
Complete* value, unless the step crashes between them.

The reference model is written from Kafka's client-visible contract, not from the
coordinator's code: per transactional id, the producer instances that called
InitProducerId (the newest is the only live one), the open transaction's
partitions, and the outcomes every transaction must end with. Checked:

- only the newest instance may add partitions or end a transaction; older ones
  are fenced (PRODUCER_FENCED), never accepted;
- each instance's (producer id, epoch) is greater than every earlier one's for the id
  (a new producer id when the epoch is exhausted);
- every transaction ends exactly once, with the client's result (COMMIT/ABORT), or
  ABORT when it was timed out or a new instance started; markers name the
  transaction's partitions and an epoch no older instance holds (they fence it);
- a retried EndTxn of a completed transaction answers NONE, the other result
  INVALID_TXN_STATE; EndTxn without a transaction INVALID_TXN_STATE;
- a restart reloads exactly the state before it, and finishes a Prepare* left by a
  crash with the same outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.transactions import records as rec
from broker.transactions.config import TxnConfig
from broker.transactions.coordinator import Refuse, TxnCoordinator, Write
from broker.transactions.state import EPOCH_EXHAUSTED, TxnMetadata, TxnState
from protocol.kafka.errors import KafkaError

E = KafkaError
TIDS = ("a", "b")
PARTITIONS = [("t", 0), ("t", 1), ("u", 0)]
TIMEOUT_MS = 1000
MAX_TIMEOUT_MS = 5000


@dataclass
class Instance:
    producer_id: int
    epoch: int


@dataclass
class TidModel:
    instances: list[Instance] = field(default_factory=list)
    open_partitions: set[tuple[str, int]] | None = None  # None: no transaction open
    last_result: bool | None = None  # commit? of the last completed transaction


@dataclass(frozen=True)
class Outcome:
    tid: str
    producer_id: int
    epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.next_pid = 100
        self.log: list[tuple[bytes, bytes | None]] = []
        self.config = TxnConfig(max_timeout_ms=MAX_TIMEOUT_MS, id_expiration_ms=10**12)
        self.coord = self._fresh()
        self.model = {tid: TidModel() for tid in TIDS}
        self.outcomes: list[Outcome] = []
        self.expected: list[tuple[str, bool]] = []  # (tid, commit) in completion order
        self.exhaust_next = False

    def _new_pid(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def _fresh(self) -> TxnCoordinator:
        coord = TxnCoordinator(self.config, self._new_pid)
        loaded: list[tuple[str, TxnMetadata | None]] = []
        for key, value in self.log:
            tid = rec.decode_key(key)
            loaded.append((tid, None if value is None else rec.decode_value(tid, value)))
        coord.load(loaded)
        return coord

    # --- the driver (what broker/transactions/service.py does) ---------------------

    def _write(self, decision: Write) -> None:
        value = None if decision.meta is None else rec.encode_value(decision.meta)
        self.log.append((rec.encode_key(decision.transactional_id), value))
        self.coord.apply(decision)

    def _finish(self, tid: str) -> None:
        meta = self.coord.txns[tid]
        self.outcomes.append(
            Outcome(
                tid,
                meta.producer_id,
                meta.producer_epoch,
                meta.state is TxnState.PREPARE_COMMIT,
                meta.partitions,
            )
        )
        self._write(self.coord.complete(tid, self.now))

    def _execute(self, decision: Refuse | Write, *, crash: bool = False) -> KafkaError:
        if isinstance(decision, Refuse):
            return decision.error
        self._write(decision)
        if decision.markers and not crash:
            self._finish(decision.transactional_id)
        return decision.answer

    def _close_open(self, tid: str, commit: bool) -> None:
        m = self.model[tid]
        assert m.open_partitions is not None
        self.expected.append((tid, commit))
        m.open_partitions = None
        m.last_result = commit

    # --- rules ---------------------------------------------------------------------

    @rule(tid=st.sampled_from(TIDS), exhaust=st.booleans())
    def init_producer(self, tid: str, exhaust: bool) -> None:
        m = self.model[tid]
        meta = self.coord.txns.get(tid)
        if exhaust and meta is not None and meta.state.completed:
            # jump the stored epoch to the edge (what 32,766 re-inits would do)
            self.coord.txns[tid] = TxnMetadata(
                **{
                    **{f: getattr(meta, f) for f in meta.__dataclass_fields__},
                    "producer_epoch": EPOCH_EXHAUSTED,
                }
            )
            m.instances.append(Instance(meta.producer_id, EPOCH_EXHAUSTED))  # a live holder
        error = self._execute(self.coord.init_producer_id(tid, TIMEOUT_MS, self.now))
        if m.open_partitions is not None:
            assert error is E.CONCURRENT_TRANSACTIONS
            self._close_open(tid, commit=False)
            error = self._execute(self.coord.init_producer_id(tid, TIMEOUT_MS, self.now))
        assert error is E.NONE, error
        meta = self.coord.txns[tid]
        assert meta.state is TxnState.EMPTY
        new = Instance(meta.producer_id, meta.producer_epoch)
        for old in m.instances:
            if new.producer_id == old.producer_id:
                assert new.epoch > old.epoch
        if m.instances and new.producer_id != m.instances[-1].producer_id:
            assert new.epoch == 0  # a new producer id (the old one's epochs ran out)
            assert m.instances[-1].epoch >= EPOCH_EXHAUSTED - 1
            assert all(new.producer_id != old.producer_id for old in m.instances)
        m.instances.append(new)
        m.last_result = None  # a new instance has ended no transaction (state Empty)

    @rule(
        tid=st.sampled_from(TIDS),
        age=st.integers(0, 2),
        parts=st.sets(st.sampled_from(PARTITIONS), min_size=1),
    )
    def add_partitions(self, tid: str, age: int, parts: set[tuple[str, int]]) -> None:
        m = self.model[tid]
        if not m.instances:
            error = self._execute(self.coord.add_partitions(tid, 1, 0, parts, self.now))
            assert error is E.INVALID_PRODUCER_ID_MAPPING
            return
        inst = m.instances[-1 - min(age, len(m.instances) - 1)]
        error = self._execute(
            self.coord.add_partitions(tid, inst.producer_id, inst.epoch, parts, self.now)
        )
        if inst is not m.instances[-1]:
            assert error in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING), error
            return
        assert error is E.NONE, error
        m.open_partitions = (m.open_partitions or set()) | parts

    @rule(
        tid=st.sampled_from(TIDS), age=st.integers(0, 1), commit=st.booleans(), crash=st.booleans()
    )
    def end_txn(self, tid: str, age: int, commit: bool, crash: bool) -> None:
        m = self.model[tid]
        if not m.instances:
            return
        inst = m.instances[-1 - min(age, len(m.instances) - 1)]
        decision = self.coord.end_txn(tid, inst.producer_id, inst.epoch, commit, self.now)
        error = self._execute(decision, crash=crash)
        if inst is not m.instances[-1]:
            assert error in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_ID_MAPPING), error
            return
        if m.open_partitions is not None:
            assert error is E.NONE, error
            self._close_open(tid, commit)
            if not crash:
                assert (self.outcomes[-1].producer_id, self.outcomes[-1].epoch) == (
                    inst.producer_id,
                    inst.epoch,
                )
            if crash:
                self.restart()
        elif m.last_result is None:
            assert error is E.INVALID_TXN_STATE, error
        else:
            assert error is (E.NONE if m.last_result == commit else E.INVALID_TXN_STATE), error

    @rule(ms=st.integers(1, 3 * TIMEOUT_MS))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        for tid in self.coord.timed_out(self.now):
            self._close_open(tid, commit=False)
            m = self.model[tid]
            error = self._execute(self.coord.fence_and_abort(tid, self.now))
            assert error is E.NONE
            # the abort's epoch is newer than every instance's: the live one is fenced
            fenced = self.coord.txns[tid]
            assert self.outcomes[-1].epoch == fenced.producer_epoch
            assert all(
                fenced.producer_epoch > i.epoch
                for i in m.instances
                if i.producer_id == fenced.producer_id
            )
            m.instances.append(Instance(fenced.producer_id, fenced.producer_epoch))

    @rule()
    def restart(self) -> None:
        before = dict(self.coord.txns)
        self.coord = self._fresh()
        after = self.coord.txns
        assert after.keys() == before.keys()
        for tid, meta in before.items():
            got = after[tid]
            assert (got.producer_id, got.producer_epoch, got.state, got.partitions) == (
                meta.producer_id,
                meta.producer_epoch,
                meta.state,
                meta.partitions,
            )
        for tid in self.coord.preparing():  # what the service's load does
            self._finish(tid)

    @rule(tid=st.sampled_from(TIDS), timeout=st.sampled_from([0, -1, MAX_TIMEOUT_MS + 1]))
    def bad_timeout(self, tid: str, timeout: int) -> None:
        decision = self.coord.init_producer_id(tid, timeout, self.now)
        assert decision == Refuse(E.INVALID_TRANSACTION_TIMEOUT)

    # --- invariants ------------------------------------------------------------------

    @invariant()
    def outcomes_match(self) -> None:
        assert [(o.tid, o.commit) for o in self.outcomes] == self.expected
        for o in self.outcomes:
            assert o.partitions  # a completed transaction had partitions

    @invariant()
    def open_state_matches(self) -> None:
        for tid, m in self.model.items():
            meta = self.coord.txns.get(tid)
            if m.open_partitions is None:
                assert meta is None or meta.state.completed, meta
            else:
                assert meta is not None and meta.state is TxnState.ONGOING
                assert meta.partitions == m.open_partitions


CoordinatorMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestCoordinatorModel = CoordinatorMachine.TestCase
