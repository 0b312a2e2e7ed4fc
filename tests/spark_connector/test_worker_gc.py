"""worker_gc outside Spark's daemon: the user's own process is never frozen."""

from __future__ import annotations

import gc

from spark_connector.worker_gc import freeze_long_lived_objects, in_spark_daemon_worker


def test_a_process_that_is_not_sparks_daemon_is_left_alone() -> None:
    before = gc.get_freeze_count()
    assert not in_spark_daemon_worker()
    assert freeze_long_lived_objects() is False
    assert gc.get_freeze_count() == before
