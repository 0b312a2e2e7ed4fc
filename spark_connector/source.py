"""The `tidelog` DataSource: option checks at load(), and the readers and writers.

Spark constructs this class in a Python worker on the driver at `load()`; an exception
there reaches the user as `PYTHON_DATA_SOURCE_ERROR` with our message verbatim, so unknown
options are refused here with the closest valid name.
"""

from __future__ import annotations

import dataclasses
import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_connector.batch import (
    TidelogBatchReader,
    TidelogPushdownReader,
    pushdown_planning_in_progress,
)
from spark_connector.options import (
    OptionError,
    SinkOptions,
    check_known,
    lower_keys,
    parse_bool,
    parse_sink_options,
    parse_source_options,
)
from spark_connector.schema import spark_schema
from spark_connector.stream import TidelogStreamReader
from spark_connector.writing import (
    TidelogArrowWriter,
    TidelogStreamArrowWriter,
    validate_sink_schema,
)

FORMAT_NAME = "tidelog"


class TidelogDataSource(DataSource):
    """`spark.read.format("tidelog")`: Kafka's source options and schema, over Tidelog."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.raw_options = lower_keys(options)
        check_known(self.raw_options)
        self.include_headers = parse_bool(
            "includeHeaders", self.raw_options.get("includeheaders", "false")
        )

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        """Called at `load()` of reads only (never for writes), so read options fail early."""
        parse_source_options(self.raw_options, streaming=None)
        return spark_schema(self.include_headers)

    def _check_schema(self, schema: StructType) -> None:
        if schema != spark_schema(self.include_headers):
            raise OptionError(
                "tidelog source has a fixed schema and cannot be set with a custom one"
            )

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        opts = parse_source_options(self.raw_options, streaming=False)
        pushdown = opts.pushdown == "true" or (
            opts.pushdown == "auto" and pushdown_planning_in_progress()
        )
        return TidelogPushdownReader(opts) if pushdown else TidelogBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return TidelogStreamReader(parse_source_options(self.raw_options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = self._sink_options(schema, overwrite)
        if opts.exactly_once and opts.write_id is None:
            # Every attempt of this save()'s tasks shares the pickled writer, so its id.
            opts = dataclasses.replace(opts, write_id=str(uuid.uuid4()))
        return TidelogArrowWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = self._sink_options(schema, overwrite)
        return TidelogStreamArrowWriter(opts)

    def _sink_options(self, schema: StructType, overwrite: bool) -> SinkOptions:
        if overwrite:
            raise OptionError(
                "tidelog is an append-only log: save mode 'overwrite' is not supported; "
                'use .mode("append")'
            )
        opts = parse_sink_options(self.raw_options)
        validate_sink_schema(schema, opts.topic)
        return opts
