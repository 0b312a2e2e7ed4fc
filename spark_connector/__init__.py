"""The PySpark Data Source (`format("tidelog")`) for batch and streaming reads and
writes.

It imports only `protocol` and the clients in `tidelog` (executors need nothing
else) and never `broker`, `storage`, `retention` or `compaction`.

Modules, driver side first: `source` (the DataSource: options at `load()`, picks the
readers and writers), `options` (Kafka's option names, precedence and messages),
`offsets` (metadata and start/end resolution), `planning` (splitting, coalescing, rate
limits; pure), `pushdown` (claimed filters as exact bounds), `batch` and `stream` (the
readers), `reading` (executor fetch loop, late binding, data loss), `arrow_convert`
(fetched batches to Arrow by column transposition), `writing` (the sinks), `schema`,
`worker_import` (the class `pyspark_tidelog` registers: pickled by value, it names the
worker's interpreter when that cannot import the connector).
User documentation: docs/spark.md.
"""

from spark_connector.source import FORMAT_NAME, TidelogDataSource

__all__ = ["FORMAT_NAME", "TidelogDataSource"]
