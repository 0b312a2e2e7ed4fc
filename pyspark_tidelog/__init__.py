"""Static registration of the `tidelog` format: PySpark registers a `DefaultSource` found in
any top-level `pyspark_*` module (it scans `pkgutil.iter_modules()` in a Python worker), so
an installed tidelog needs no `register()` call.

`DefaultSource` is the class that checks, in each worker that builds it, that the worker's
Python can import the connector (spark_connector/worker_import.py).
"""

from spark_connector.worker_import import ShippedDataSource as DefaultSource

__all__ = ["DefaultSource"]
