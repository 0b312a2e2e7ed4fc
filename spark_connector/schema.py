"""The fixed row schema, identical to Spark's Kafka source, in Spark DDL and in Arrow.

Arrow batches yielded by `read()` must match the Spark schema exactly (only the first
batch is checked by Spark, a later mismatch fails cryptically), so both forms live here.

Names, types and order are the Kafka source's. Nullability is tighter: `topic`,
`partition`, `offset`, `timestamp` and `timestampType` are declared NOT NULL, because no
record can lack them (Kafka's source leaves every column nullable only by Spark's
default). Spark then skips a null check per row and column when it turns our Arrow
batches into rows, which measured 4-15% of the JVM's CPU per read (docs/benchmarks.md).
`key`, `value` (tombstones) and `headers` stay nullable.
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
    "key binary, value binary, topic string not null, partition int not null, "
    "offset long not null, timestamp timestamp not null, timestampType int not null"
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
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("timestampType", pa.int32(), nullable=False),
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
        StructField("topic", StringType(), nullable=False),
        StructField("partition", IntegerType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        StructField("timestamp", TimestampType(), nullable=False),
        StructField("timestampType", IntegerType(), nullable=False),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)
