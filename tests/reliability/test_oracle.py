"""The oracle itself against a real broker: it must tell retention, which may run while a
starved verify reads, from loss (the kill-cycle soak once failed on exactly this race)."""

from __future__ import annotations

import random
from pathlib import Path

from tests.conftest import start_broker
from tests.reliability.harness import produce_once
from tests.reliability.oracle import Ledger, fetch_all, verify
from tidelog.client import Client


class RetentionRacesTheFirstFetch(Client):
    """A real client whose first fetch is preceded by a log start raised to `to` (what
    retention does between the oracle's list_offsets and its fetch)."""

    def __init__(self, bootstrap: str, to: int) -> None:
        super().__init__(bootstrap)
        self._to: int | None = to

    def fetch(self, topic, partition, offset, **kwargs):  # type: ignore[no-untyped-def]
        if self._to is not None:
            to, self._to = self._to, None
            self.delete_records(topic, partition, to)
        return super().fetch(topic, partition, offset, **kwargs)


def test_the_oracle_follows_a_log_start_raised_while_it_reads(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "data")
    try:
        ledger = Ledger()
        rng = random.Random(3)
        with Client(broker.bootstrap) as client:
            client.create_topic("raced", 1)
            for seq in range(4):
                produce_once(
                    client, ledger, "raced", 0, "p", seq * 3, acks=-1, records=3,
                    value_bytes=50, rng=rng,
                )  # fmt: skip
        with RetentionRacesTheFirstFetch(broker.bootstrap, to=6) as racing:
            problems: list[str] = []
            start, hwm, records = fetch_all(racing, "raced", 0, problems)
            assert problems == []
            assert (start, hwm) == (6, 12)
            assert [r.offset for r in records] == list(range(6, 12))
        with RetentionRacesTheFirstFetch(broker.bootstrap, to=9) as racing:
            assert verify(racing, tmp_path / "data", ledger, {"raced": 1}) == []
    finally:
        broker.stop()
