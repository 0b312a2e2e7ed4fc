"""What ApiVersions advertises is what the rows serve: a table may know more versions
(a schema landing before its handler), a row may serve fewer, never more."""

from __future__ import annotations

import pytest

from broker.kafka.call import KafkaApi
from broker.kafka.connection import advertised_ranges, served
from broker.kafka.registry import KAFKA_APIS, SERVED_VERSIONS, served_range
from protocol.kafka.codec import RequestHeader
from protocol.kafka.messages import (
    ADD_PARTITIONS_TO_TXN,
    ALL_APIS,
    API_VERSIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    METADATA,
)
from protocol.kafka.schema import version_range


async def _nothing(call: object) -> None:
    return None


def test_advertised_is_every_row_at_its_versions() -> None:
    ranges = {r["api_key"]: (r["min_version"], r["max_version"]) for r in advertised_ranges()}
    assert set(ranges) == set(KAFKA_APIS) | {API_VERSIONS.key}
    for key, row in KAFKA_APIS.items():
        table = version_range(next(a for a in ALL_APIS if a.key == key).versions)
        low, high = ranges[key]
        assert table.low <= low <= high <= table.high
        if row.versions is None:
            assert (low, high) == (table.low, table.high)


def test_tables_ahead_of_their_handlers_are_not_advertised() -> None:
    # transactions version 2 (KIP-890 part 2) and 2PC (KIP-939) are not served
    assert SERVED_VERSIONS[END_TXN.key].high == 4 < END_TXN.max_version
    assert SERVED_VERSIONS[ADD_PARTITIONS_TO_TXN.key].high == 4 < ADD_PARTITIONS_TO_TXN.max_version
    assert SERVED_VERSIONS[INIT_PRODUCER_ID.key].high == 5 < INIT_PRODUCER_ID.max_version
    assert not served(RequestHeader(INIT_PRODUCER_ID.key, 6, 1, None))
    assert served(RequestHeader(INIT_PRODUCER_ID.key, 5, 1, None))
    assert served(RequestHeader(END_TXN.key, 3, 1, None))
    assert not served(RequestHeader(END_TXN.key, 5, 1, None))


def test_a_row_beyond_its_table_is_a_programming_error() -> None:
    with pytest.raises(RuntimeError, match="table covers"):
        served_range(METADATA.key, KafkaApi(_nothing, versions="0-14"))
    with pytest.raises(RuntimeError, match="no table"):
        served_range(999, KafkaApi(_nothing))
    assert served_range(METADATA.key, KafkaApi(_nothing, versions="1-3")) == version_range("1-3")
