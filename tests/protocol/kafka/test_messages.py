"""Our message tables against Kafka's JSON schemas, as kafka-python ships them.

kafka-python 3 bundles Apache Kafka's `common/message/*.json` (a newer Kafka than
the one `messages.py` was generated from). Read independently here, they must give
the same wire layout for every API and version we serve: the same fields, in the
same order, of the same types, nullable in the same versions, with the same tags.
New Kafka versions only add fields beyond our range, so this holds across Kafka
releases; a version newer than the bundled schemas (gen_messages.EXTRA_FIELDS) is
checked against the layout Kafka 4.4's generated classes print (`test_newer_than_bundled`).
"""

from __future__ import annotations

import json
import re
from importlib.resources import files
from typing import Any

import pytest

from harness import kafka_python
from protocol.kafka.gen_messages import EXTRA_FIELDS, inline_common_structs, snake
from protocol.kafka.messages import ALL_APIS, API_VERSIONS
from protocol.kafka.schema import Field, version_range

# kafka_python imports the kafka package with its deprecation warning silenced.
assert kafka_python.CLASSES
RESOURCES = files("kafka.protocol.schemas") / "resources"


def _json(name: str) -> dict[str, Any]:
    text = (RESOURCES / f"{name}.json").read_text()
    schema = json.loads(re.sub(r"(?m)^\s*//.*$", "", text))
    # "[]AddPartitionsToTxnTopic": a struct of the schema's commonStructs, laid out in place.
    schema["fields"] = inline_common_structs(schema["fields"], schema.get("commonStructs", []))
    return schema


def _kind(field: dict[str, Any]) -> str:
    if "fields" not in field:
        return field["type"]
    return "[]" if field["type"].startswith("[]") else "struct"


def _theirs(fields: list[dict[str, Any]], version: int) -> list:
    return [
        (
            snake(f["name"]),
            _kind(f),
            version in version_range(f.get("nullableVersions", "none")),
            _theirs(f.get("fields", []), version),
            f.get("tag"),
        )
        for f in fields
        if version in version_range(f["versions"])
    ]


def _ours(fields: tuple[Field, ...], version: int) -> list:
    return [
        (f.name, f.type, version in version_range(f.nullable), _ours(f.fields, version), f.tag)
        for f in fields
        if version in version_range(f.versions)
    ]


CASES = [
    pytest.param(api, version, id=f"{api.name}-v{version}")
    for api in ALL_APIS
    for version in range(api.min_version, api.max_version + 1)
]


@pytest.mark.parametrize(("api", "version"), CASES)
def test_layout_matches_kafkas_json(api, version):
    request, response = _json(f"{api.name}Request"), _json(f"{api.name}Response")
    if version > version_range(request["validVersions"]).high:
        assert f"{api.name}Request" in EXTRA_FIELDS, (api.name, version)
        return  # newer than the bundled schemas: test_newer_than_bundled
    assert request["apiKey"] == api.key
    assert version_range(request["flexibleVersions"]).low == version_range(api.flexible).low
    assert _ours(api.request, version) == _theirs(request["fields"], version)
    assert _ours(api.response, version) == _theirs(response["fields"], version)


def test_newer_than_bundled():
    """ApiVersions v5 as Kafka 4.4's ApiVersionsRequestData.SCHEMAS[5] prints it:
    {client_software_name:COMPACT_STRING, client_software_version:COMPACT_STRING,
    cluster_id:COMPACT_NULLABLE_STRING, node_id:INT32}; the response as v4's."""
    assert _ours(API_VERSIONS.request, 5) == [
        ("client_software_name", "string", False, [], None),
        ("client_software_version", "string", False, [], None),
        ("cluster_id", "string", True, [], None),
        ("node_id", "int32", False, [], None),
    ]
    assert _ours(API_VERSIONS.response, 5) == _ours(API_VERSIONS.response, 4)
