"""Regenerate `messages.py` from Kafka's JSON message schemas.

    python -m protocol.kafka.gen_messages <kafka>/clients/src/main/resources/common/message

Kafka's schemas are the source of truth; this keeps our tables a mechanical
translation of them. For each API in `VERSIONS` it keeps the fields that exist in
the versions the table covers, in schema order, with Kafka's version-range strings;
tagged fields keep their `tag` (the codec reads and writes them in the struct's
tagged-field section). The source is Kafka 4.4's schemas (`common/message/` in its
kafka-clients jar, which the interop suite fetches into ~/.m2) or, to the same
output, the ones kafka-python 3 bundles (kafka/protocol/schemas/resources) with
`EXTRA_FIELDS`, the few fields of Kafka 4.4 they lack.

A table's versions are what the codec can decode and encode, not what the broker
serves: each Kafka adapter row declares the versions it serves
(`broker.kafka.call.KafkaApi.versions`) and ApiVersions advertises those only, so a
schema can land before its handler. Run it again, and review the diff, to cover
another version.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from protocol.kafka.schema import version_range

# API name -> the versions its table covers. What is served (and advertised) is each
# adapter row's `versions` within these (broker/kafka/registry.py).
VERSIONS: dict[str, str] = {
    "Produce": "0-13",  # v9+ flexible; v13: topics by id
    "Fetch": "4-18",  # v12+ flexible (diverging epoch); v13+: topics by id
    "ListOffsets": "1-10",  # v7: max timestamp (KIP-734); v8: local start; v9: tiered
    "Metadata": "0-13",  # v10+: topic ids; v12+: asked by id; v13: error_code
    "OffsetCommit": "2-9",  # v8+ flexible; v9: KIP-848 epochs (classic groups alike)
    "OffsetFetch": "0-9",  # v7: require_stable (KIP-447); v8+: groups (batched)
    "FindCoordinator": "0-6",  # v4+: coordinator_keys (batched)
    "JoinGroup": "0-9",
    "Heartbeat": "0-4",
    "LeaveGroup": "0-5",
    "SyncGroup": "0-5",
    "DescribeGroups": "0-6",
    "ListGroups": "0-5",
    "ApiVersions": "0-5",  # v4: features with a minimum of 0 too; v5: EXTRA_FIELDS
    "CreateTopics": "2-7",  # v5+: the created topic described; v7: its id
    "DeleteTopics": "1-6",  # v6: by name or id
    "DeleteRecords": "0-2",
    "InitProducerId": "0-6",
    "DescribeConfigs": "1-4",
    "AlterConfigs": "0-2",
    "DeleteGroups": "0-2",
    "IncrementalAlterConfigs": "0-1",
    "OffsetDelete": "0",
    "DescribeCluster": "0-2",
    # Security (docs/security.md): SASL login and kafka-acls.
    # The admin APIs the tools call (docs/kafka.md, "Cluster administration").
    "CreatePartitions": "0-3",
    "DescribeLogDirs": "1-5",
    "ElectLeaders": "0-2",
    "AlterPartitionReassignments": "0",
    "ListPartitionReassignments": "0",
    "SaslHandshake": "1",  # v0 (raw tokens after it) is gone in Kafka 4 (KIP-896)
    "SaslAuthenticate": "0-2",
    "CreateAcls": "1-3",
    "DescribeAcls": "1-3",
    "DeleteAcls": "1-3",
    # Issue 37's remaining admin APIs (docs/kafka.md, "Cluster administration"): quotas,
    # SCRAM users (flexible-only in Kafka) and the truncation check Java consumers send.
    "OffsetForLeaderEpoch": "2-4",
    "DescribeClientQuotas": "0-1",
    "AlterClientQuotas": "0-1",
    "DescribeUserScramCredentials": "0",
    "AlterUserScramCredentials": "0",
    # Transactions (issue 36): tables first, served once broker/transactions/ has them.
    "AddPartitionsToTxn": "0-5",  # v4+: the broker's verify-only batch (KIP-890)
    "AddOffsetsToTxn": "0-4",
    "EndTxn": "0-5",
    "WriteTxnMarkers": "0-2",
    "TxnOffsetCommit": "0-5",
    "DescribeProducers": "0",
    "DescribeTransactions": "0",
    "ListTransactions": "0-2",
}

# Fields of a newer Kafka than the bundled schemas, by schema file: the versions then
# valid, and the fields appended. ApiVersionsRequest v5, from Kafka 4.4's
# ApiVersionsRequestData: the cluster and node the client believes it reached (the
# broker answers REBOOTSTRAP_REQUIRED when they are not its own).
EXTRA_FIELDS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "ApiVersionsRequest": (
        "0-5",
        [
            {"name": "ClusterId", "type": "string", "versions": "5+",
             "nullableVersions": "5+", "default": "null"},
            {"name": "NodeId", "type": "int32", "versions": "5+", "default": "-1"},
        ],
    ),
    "ApiVersionsResponse": ("0-5", []),
}  # fmt: skip

_INT_TYPES = {"int8", "int16", "uint16", "int32", "uint32", "int64"}


def snake(name: str) -> str:
    """Kafka's CamelCase field names in Python's style: ThrottleTimeMs -> throttle_time_ms."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def load(path: Path) -> dict[str, Any]:
    """A schema file without its // comments."""
    text = "\n".join(re.sub(r"^\s*//.*$", "", line) for line in path.read_text().splitlines())
    schema: dict[str, Any] = json.loads(text)
    extra = EXTRA_FIELDS.get(path.stem)
    newer = extra is not None and (
        version_range(extra[0]).high > version_range(schema["validVersions"]).high
    )
    if extra is not None and newer:
        valid, fields = extra
        schema["validVersions"] = valid
        schema["fields"] = [*schema["fields"], *fields]
    schema["fields"] = inline_common_structs(schema["fields"], schema.get("commonStructs", []))
    return schema


def inline_common_structs(
    fields: list[dict[str, Any]], common: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Fields whose type names one of the schema's `commonStructs` ("[]AddPartitionsToTxnTopic")
    with that struct's fields inline, as if declared in place (the same wire layout)."""
    structs = {struct["name"]: struct["fields"] for struct in common}
    out = []
    for f in fields:
        f = dict(f)
        name = f["type"].removeprefix("[]")
        if "fields" not in f and name in structs:
            f["fields"] = structs[name]
        if "fields" in f:
            f["fields"] = inline_common_structs(f["fields"], common)
        out.append(f)
    return out


def _overlaps(spec: str, served: str) -> bool:
    a, b = version_range(spec), version_range(served)
    return not a.empty and a.low <= b.high and b.low <= a.high


def _default(field: dict[str, Any]) -> Any:
    raw = field.get("default")
    if raw is None:
        return None
    raw = str(raw)
    if raw == "null":
        return "null"  # rendered as an explicit None below
    kind = field["type"]
    if kind in _INT_TYPES:
        return int(raw, 0)
    if kind == "bool":
        return raw == "true"
    if kind == "string":
        return raw
    raise ValueError(f"default {raw!r} for type {kind}")


def render_fields(fields: list[dict[str, Any]], served: str, indent: str) -> list[str]:
    lines: list[str] = []
    for f in fields:
        if not _overlaps(f["versions"], served):
            continue
        kind = f["type"]
        sub = f.get("fields")
        if sub is not None and kind.startswith("[]"):
            kind = "[]"
        elif sub is not None:
            kind = "struct"
        args = [repr(snake(f["name"])), repr(kind), repr(f["versions"])]
        kwargs = []
        nullable = f.get("nullableVersions")
        if nullable and _overlaps(nullable, served):
            kwargs.append(f"nullable={nullable!r}")
        if "tag" in f:
            kwargs.append(f"tag={f['tag']}")
        default = _default(f)
        if default == "null":
            kwargs.append("default=None")
        elif default is not None and default not in (0, False, ""):
            kwargs.append(f"default={default!r}")
        if sub is None:
            lines.append(f"{indent}F({', '.join(args + kwargs)}),")
            continue
        lines.append(f"{indent}F(")
        lines.append(f"{indent}    {', '.join(args)},")
        lines.extend(render_fields(sub, served, indent + "    "))
        lines.extend(f"{indent}    {kw}," for kw in kwargs)
        lines.append(f"{indent}),")
    return lines


def render(message_dir: Path) -> str:
    out = [
        '"""Kafka message schemas for the APIs and versions Tidelog serves.',
        "",
        "Generated by `python -m protocol.kafka.gen_messages` from Apache Kafka's",
        "clients/src/main/resources/common/message/*.json; do not edit by hand.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from protocol.kafka.schema import Api, F",
        "",
    ]
    names = []
    for api_name, served in VERSIONS.items():
        request = load(message_dir / f"{api_name}Request.json")
        response = load(message_dir / f"{api_name}Response.json")
        const = snake(api_name).upper()
        names.append(const)
        out.append(f"{const} = Api(")
        out.append(f"    key={request['apiKey']},")
        out.append(f"    name={api_name!r},")
        out.append(f"    versions={served!r},")
        out.append(f"    flexible={request['flexibleVersions']!r},")
        out.append("    request=(")
        out.extend(render_fields(request["fields"], served, "        "))
        out.append("    ),")
        out.append("    response=(")
        out.extend(render_fields(response["fields"], served, "        "))
        out.append("    ),")
        out.append(")")
        out.append("")
    out.append("ALL_APIS: tuple[Api, ...] = (")
    out.extend(f"    {name}," for name in names)
    out.append(")")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    target = Path(__file__).with_name("messages.py")
    target.write_text(render(Path(argv[1])))
    print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv)
