"""The fixed row schema, identical to Spark's Kafka source, in Spark DDL and in Arrow.

Arrow batches yielded by `read()` must match the Spark schema exactly (only the first
batch is checked by Spark, a later mismatch fails cryptically), so both forms live here.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

BASE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

# Kafka's TimestampType ids: -1 none, 0 CreateTime, 1 LogAppendTime.
TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

HEADER_ARROW_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
)

BASE_ARROW_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]

BASE_ARROW_SCHEMA = pa.schema(BASE_ARROW_FIELDS)
HEADERS_ARROW_SCHEMA = pa.schema([*BASE_ARROW_FIELDS, pa.field("headers", HEADER_ARROW_TYPE)])


def schema_ddl(include_headers: bool) -> str:
    """The Spark DDL of the row schema, with the `headers` column only when asked for."""
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema `read()` yields, matching `schema_ddl` exactly."""
    return HEADERS_ARROW_SCHEMA if include_headers else BASE_ARROW_SCHEMA


def spark_schema(include_headers: bool) -> StructType:
    """The Spark StructType of the row schema (what `DataSource.schema()` returns)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)
