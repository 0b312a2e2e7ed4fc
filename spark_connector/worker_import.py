"""The class Spark registers as `tidelog`: it reaches the Python workers even when they
cannot import the connector, and then says so plainly.

Spark pickles a registered DataSource class and rebuilds it in a Python worker at `load()`
and `save()`. Pickled by reference, as every importable class is, a worker whose
interpreter lacks Tidelog fails while unpickling: `ModuleNotFoundError: No module named
'spark_connector'` at the bottom of a long Java stack trace, naming neither the
interpreter nor the fix. This module is pickled by value instead (it imports nothing
from the connector at import time), so its class reaches the worker, imports the real
source there, and turns an import failure into `ConnectorImportError`: the worker's
interpreter, the interpreter that had the connector, and the ways to fix it.

The check runs at planning, in the worker that builds the source; in local mode and on
a cluster whose nodes share one Python, that is the interpreter the tasks use too.
Executors with a Python of their own are shipped the readers and writers by reference
and would still fail with the bare `ModuleNotFoundError` (see docs/spark.md).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pyspark import cloudpickle
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_connector.source import FORMAT_NAME

if TYPE_CHECKING:
    from spark_connector.source import TidelogDataSource

# The interpreter that pickled the class (the driver, or the worker that found the
# format); pickling copies this value into the class, so a failing worker can name it.
SOURCE_PYTHON = sys.executable


class ConnectorImportError(ImportError):
    """The Spark Python worker cannot import the tidelog connector (or a dependency)."""


def connector_import_message(cause: ImportError, worker_python: str, source_python: str) -> str:
    """What the user reads: which interpreter failed, which one works, how to fix it."""
    works = (
        f" The Python that registered the format, {source_python}, has it."
        if source_python and source_python != worker_python
        else ""
    )
    return (
        f"tidelog: Spark's Python worker {worker_python} cannot import the tidelog "
        f"connector ({cause}).{works} Spark starts its workers with PYSPARK_PYTHON "
        "(or spark.pyspark.python), else `python3` from PATH, not with the driver's "
        "interpreter. Fix it one of these ways: activate the virtualenv that has tidelog "
        "before starting the job; set PYSPARK_PYTHON to a Python that has tidelog[spark] "
        "before the session starts; install tidelog[spark] into the workers' Python; or ship "
        "it with the job (on YARN or Kubernetes, a venv-pack archive with --archives and "
        "PYSPARK_PYTHON=./env/bin/python). See docs/spark.md, 'Installing and shipping'."
    )


def import_source_class() -> type[TidelogDataSource]:
    """The real `TidelogDataSource`, imported in this process (a Spark worker)."""
    try:
        from spark_connector.source import TidelogDataSource
    except ImportError as exc:
        message = connector_import_message(exc, sys.executable, SOURCE_PYTHON)
        raise ConnectorImportError(message) from exc
    return TidelogDataSource


class ShippedDataSource(DataSource):
    """`format("tidelog")`: checks the worker can import the connector, then delegates.

    Every method hands over to a `TidelogDataSource` built in `__init__`, so options,
    schema, readers and writers are exactly that class's.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._source = import_source_class()(options)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return self._source.schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return self._source.reader(schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return self._source.streamReader(schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return self._source.writer(schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return self._source.streamWriter(schema, overwrite)


# Pickle this module's classes and functions by value: a worker then needs only PySpark
# to rebuild `ShippedDataSource` and run its import check.
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]  # PySpark's vendored cloudpickle has no type hints
