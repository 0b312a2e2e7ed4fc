"""`ShippedDataSource`: pickled by value, it reaches a Python that lacks the connector and
says which interpreter that is; where the connector imports, it is `TidelogDataSource`."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark import cloudpickle

from spark_connector.options import OptionError
from spark_connector.source import TidelogDataSource
from spark_connector.worker_import import ShippedDataSource

OPTIONS = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}

# A Python where PySpark imports but the connector does not: `None` in sys.modules makes
# `import spark_connector` raise ImportError, as in a worker without Tidelog.
UNPICKLE_WITHOUT_CONNECTOR = """
import sys
for name in [m for m in sys.modules if m.split(".")[0] in ("spark_connector", "protocol")]:
    del sys.modules[name]
sys.modules["spark_connector"] = None
from pyspark import cloudpickle
try:
    cls = cloudpickle.loads(sys.stdin.buffer.read())
except ImportError as exc:
    sys.exit(f"unpickling failed: {exc}")
print(cls.name())
try:
    cls({"subscribe": "events"})
except ImportError as exc:
    print(type(exc).__name__, exc)
"""


def unpickle_without_connector(cls: type) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", UNPICKLE_WITHOUT_CONNECTOR],
        input=cloudpickle.dumps(cls).decode("latin-1"),
        capture_output=True,
        text=True,
        encoding="latin-1",
        timeout=60,
    )


def test_a_worker_without_the_connector_gets_its_interpreter_and_the_fix_named() -> None:
    proc = unpickle_without_connector(ShippedDataSource)
    assert proc.returncode == 0, proc.stderr
    name, error = proc.stdout.splitlines()
    assert name == "tidelog"
    assert error.startswith(
        f"ConnectorImportError tidelog: Spark's Python worker {sys.executable} cannot import "
        "the tidelog connector (No module named 'spark_connector.source'; "
    )
    assert "PYSPARK_PYTHON" in error and "docs/spark.md" in error


def test_the_real_class_alone_cannot_even_be_unpickled_there() -> None:
    """The contrast: pickled by reference, the class needs its module to be rebuilt."""
    proc = unpickle_without_connector(TidelogDataSource)
    assert proc.returncode == 1
    assert "unpickling failed: No module named 'spark_connector.source'" in proc.stderr


def test_delegates_everything_to_tidelog_data_source() -> None:
    shipped, real = ShippedDataSource(OPTIONS), TidelogDataSource(OPTIONS)
    assert ShippedDataSource.name() == TidelogDataSource.name()
    assert shipped.schema() == real.schema()
    schema = real.schema()
    assert type(shipped.reader(schema)) is type(real.reader(schema))
    assert type(shipped.streamReader(schema)) is type(real.streamReader(schema))
    with pytest.raises(OptionError, match="subscribe"):
        ShippedDataSource({"bootstrap.servers": "x", "subscribe": "t", "subscrbe": "t"})
