"""Static registration of the `tidelog` format: PySpark registers a `DefaultSource` found in
any top-level `pyspark_*` module, so an installed tidelog needs no `register()` call."""

from spark_connector.source import TidelogDataSource as DefaultSource

__all__ = ["DefaultSource"]
