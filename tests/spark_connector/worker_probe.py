"""A Python data source that reports, per task, which worker ran it and how many objects
that worker has frozen (`gc.get_freeze_count()`). Spark runs every Python data source's
tasks in the same daemon-forked workers, so after a tidelog read this shows whether
those workers froze their long-lived objects (spark_connector/worker_gc.py)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

TASKS = 8


class _ProbeReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(TASKS)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        yield (os.getpid(), gc.get_freeze_count())


class WorkerProbe(DataSource):
    @classmethod
    def name(cls) -> str:
        return "worker_probe"

    def schema(self) -> str:
        return "pid long, frozen long"

    def reader(self, schema: object) -> DataSourceReader:
        return _ProbeReader()
