"""kafka-transactions.sh (Kafka 4.4's `org.apache.kafka.tools.TransactionsCommand`) on a
hanging transaction, on Apache Kafka and on Tidelog (issue 36's acceptance).

A transactional producer (`TxnApp hang`) begins a transaction on partitions 0 and 1 of a
topic whose partition 0 already holds two plain records, and is killed with SIGKILL: its
transaction (timeout: 15 minutes, the default transaction.max.timeout.ms) blocks the
last stable offset. Then, with the tool: list, describe, describe-producers, abort of
partition 0's transaction by --start-offset, describe-producers again; and the tool's
refusals (an offset where no transaction starts, an unknown transactional id). Producer
ids, epochs and clocks are masked; everything else the tool prints, ListOffsets under
read_committed and a raw Fetch of the partitions must be the same on both brokers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interop import java_tools as tools
from interop.compare import differences
from interop.ecosystem import kafka_io, txn_confluent
from interop.ecosystem.txn_apps import HangingProducer
from interop.ecosystem.txn_wire import ProducerNames, topic_view
from interop.targets import Target

pytestmark = pytest.mark.interop

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"  # kafka-transactions.sh
MASKED = {"ProducerId", "ProducerEpoch", "LastTimestamp", "CurrentTransactionStartTimeMs",
          "TransactionDurationMs"}  # fmt: skip


def _table(out: str, names: dict[str, str]) -> list[dict[str, str]]:
    """A prettyPrintTable: a header row, then rows; columns never hold spaces."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    if not lines:
        return []
    header, *rows = lines
    table = []
    for row in rows:
        entry = dict(zip(header, row, strict=True))
        for key in MASKED & entry.keys():
            entry[key] = "<masked>"
        if "TopicPartitions" in entry:
            entry["TopicPartitions"] = ",".join(sorted(entry["TopicPartitions"].split(",")))
        table.append({k: _rename(v, names) for k, v in entry.items()})
    return sorted(table, key=lambda row: sorted(row.items()))


def _rename(value: str, names: dict[str, str]) -> str:
    for actual, placeholder in names.items():
        value = value.replace(actual, placeholder)
    return value


def _tool(bootstrap: str, *args: str) -> str:
    return tools.run_tool(TRANSACTIONS, ["--bootstrap-server", bootstrap, *args]).stdout


def _refusal(bootstrap: str, names: dict[str, str], *args: str) -> str:
    """The tool's error line (it exits 1), names replaced."""
    with pytest.raises(tools.ToolError) as info:
        _tool(bootstrap, *args)
    message = str(info.value).split(": ", 1)[1]
    lines = [line for line in message.splitlines() if line.strip()]
    return _rename(re.sub(r"\s+", " ", lines[0]) if lines else "", names)


def _observe(target: Target, unique: Callable[[str], str], tmp: Path) -> dict[str, Any]:
    bootstrap = target.bootstrap
    topic, txn_id = unique("txn-tool"), unique("txn-tool-id")
    names = {txn_id: "<txn-id>", topic: "<topic>"}
    kafka_io.create_topic(bootstrap, topic, 2)
    kafka_io.produce(bootstrap, topic, [(0, b"k", b"plain-0", [], None)] * 2)
    hanging = HangingProducer(bootstrap, topic, txn_id, tmp / f"hang-{target.name}.log")
    try:
        sent = hanging.wait_sent()
    finally:
        hanging.kill()
    seen: dict[str, Any] = {"sent": sent}

    listed = _table(_tool(bootstrap, "list"), names)
    seen["list"] = [row for row in listed if row["TransactionalId"] == "<txn-id>"]
    seen["describe"] = _table(_tool(bootstrap, "describe", "--transactional-id", txn_id), names)
    for p in (0, 1):
        seen[f"producers_{p}"] = _table(
            _tool(bootstrap, "describe-producers", "--topic", topic, "--partition", str(p)), names
        )
    seen["offsets_hanging"] = txn_confluent.list_offsets(bootstrap, topic)

    seen["abort_nothing_there"] = _refusal(
        bootstrap, names, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1"
    )
    seen["abort"] = _tool(
        bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2"
    )
    seen["producers_0_after"] = _table(
        _tool(bootstrap, "describe-producers", "--topic", topic, "--partition", "0"), names
    )
    seen["offsets_after"] = txn_confluent.list_offsets(bootstrap, topic)
    seen["describe_unknown"] = _refusal(
        bootstrap, names, "describe", "--transactional-id", txn_id + "-nope"
    )
    seen["wire"] = topic_view(bootstrap, topic, 2, ProducerNames())
    return seen


def _starts(rows: list[dict[str, str]]) -> list[str]:
    return sorted(r["CurrentTransactionStartOffset"] for r in rows)


def _check_model(seen: dict[str, Any]) -> None:
    assert seen["sent"] == 'SENT ["hang-0",0,2],["hang-1",1,0]'
    assert seen["list"] == [
        {"TransactionalId": "<txn-id>", "Coordinator": "1", "ProducerId": "<masked>",
         "TransactionState": "Ongoing"}
    ]  # fmt: skip
    [described] = seen["describe"]
    assert described["TransactionState"] == "Ongoing"
    assert described["TopicPartitions"] == "<topic>-0,<topic>-1"
    assert described["TransactionTimeoutMs"] == "900000"
    # partition 0 also has the idempotent producer of the two plain records
    assert _starts(seen["producers_0"]) == ["2", "None"]
    assert _starts(seen["producers_1"]) == ["0"]
    assert seen["offsets_hanging"]["read_committed"] == {0: 2, 1: 0}
    assert seen["offsets_hanging"]["read_uncommitted"] == {0: 3, 1: 1}
    assert seen["abort_nothing_there"].startswith(
        "Could not find any open transactions starting at offset 1 on partition <topic>-0"
    ), seen["abort_nothing_there"]
    assert _starts(seen["producers_0_after"]) == ["None", "None"]
    # partition 0's transaction is aborted (its marker is offset 3); partition 1's still hangs
    assert seen["offsets_after"]["read_committed"] == {0: 4, 1: 0}
    assert seen["offsets_after"]["read_uncommitted"] == {0: 4, 1: 1}
    wire = seen["wire"]["read_committed"]
    hanging = next(b["producer"] for b in wire["0"]["batches"] if b.get("values") == ["hang-0"])
    assert wire["0"]["aborted"] == [[hanging, 2]]
    assert wire["1"]["last_stable_offset"] == 0
    assert seen["describe_unknown"] == (
        "Failed to describe transaction state of transactional-id `<txn-id>-nope`: "
        "DescribeTransactions request for transactionalId `<txn-id>-nope` failed because the "
        "ID could not be found. Enable debug logging for additional detail."
    )


@pytest.mark.timeout(300)
def test_kafka_transactions_tool_on_kafka_4_4_defaults(
    kafka: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    _check_model(_observe(kafka, unique, tmp_path))


@pytest.mark.timeout(400)
def test_kafka_transactions_tool_as_on_kafka(
    kafka_tv1: Target, tidelog: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    on_kafka = _observe(kafka_tv1, unique, tmp_path)
    _check_model(on_kafka)
    on_tidelog = _observe(tidelog, unique, tmp_path)
    assert differences(on_kafka, on_tidelog) == []
    _check_model(on_tidelog)


@pytest.mark.timeout(300)
def test_one_kafka_broker_twice_looks_the_same(
    kafka_tv1: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Nothing run-specific is kept (ids, epochs, clocks masked): two runs on one broker agree."""
    first = _observe(kafka_tv1, unique, tmp_path)
    assert differences(first, _observe(kafka_tv1, unique, tmp_path)) == []
