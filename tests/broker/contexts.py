"""A real BrokerContext over a LogManager in a directory, for handler and adapter tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import trio

from broker.config import DEFAULT_LISTEN, BrokerConfig
from broker.context import BrokerContext
from broker.groupcommit import GroupCommitter
from broker.longpoll import AppendNotifier
from broker.metrics import BrokerMetrics
from storage.manager import LogManager

NOW_MS = 1_700_000_000_000


def open_context(
    data_dir: Path,
    nursery: trio.Nursery,
    props: Mapping[str, str] | None = None,
    *,
    listen: tuple[str, int] = DEFAULT_LISTEN,
) -> BrokerContext:
    """An opened LogManager at a fixed clock; the caller closes `ctx.manager`."""
    config = BrokerConfig.from_props(props or {}, data_dir=data_dir, listen=listen)
    manager = LogManager(config.data_dir, config.log_config, clock_ms=lambda: NOW_MS)
    manager.open()
    return BrokerContext(
        config=config,
        manager=manager,
        notifier=AppendNotifier(),
        committer=GroupCommitter(nursery),
        metrics=BrokerMetrics("test"),
        clock_ms=lambda: NOW_MS,
    )
