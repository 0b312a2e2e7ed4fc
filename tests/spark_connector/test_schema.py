"""The Spark schema and the Arrow schema of the rows agree the way Spark checks them."""

from __future__ import annotations

import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from spark_connector.schema import arrow_schema, spark_schema

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_is_what_spark_derives_from_the_spark_schema(include_headers: bool) -> None:
    # Spark's Python worker compares the first yielded batch's schema with exactly this.
    derived = to_arrow_schema(spark_schema(include_headers), timezone="UTC")
    assert derived.equals(arrow_schema(include_headers))


def test_kafka_names_and_order_with_never_null_columns_declared_not_null() -> None:
    schema = spark_schema(True)
    assert schema.fieldNames() == [*KAFKA_COLUMNS, "headers"]
    nullable = {field.name: field.nullable for field in schema.fields}
    assert nullable == {
        "key": True,
        "value": True,  # tombstones
        "topic": False,
        "partition": False,
        "offset": False,
        "timestamp": False,
        "timestampType": False,
        "headers": True,  # null when a record has none, as in Kafka
    }
