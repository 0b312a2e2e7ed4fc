"""One table of APIs: every schema registered in one place, whatever is imported first,
and the broker's dispatch table answering exactly those names."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest

from broker.dispatch import HANDLERS
from protocol.framing import encode_body
from protocol.schema_types import decoder_struct
from protocol.schemas import API_VERSIONS, APIS, FETCH_PARTITION_ANSWER


def test_dispatch_table_and_schema_table_name_the_same_apis() -> None:
    assert set(HANDLERS) == set(APIS) == set(API_VERSIONS)


def test_extension_apis_validate_without_importing_their_modules() -> None:
    # A fresh interpreter that imports only the schema table: the extension APIs are
    # there (they used to appear only once protocol.offsets_schema had been imported).
    probe = (
        "import sys\n"
        "from protocol.schemas import validate_request_body\n"
        "body = validate_request_body('commit_offsets', {'group': 'g', 'topics': []})\n"
        "assert body == {'group': 'g', 'topics': [], 'generation': -1, 'member_id': '',"
        " 'group_instance_id': None}, body\n"
        "assert validate_request_body('explain_retention', {'topic': 't'})['partitions'] is None\n"
        "assert 'protocol.offsets_schema' not in sys.modules\n"
        "assert 'protocol.retention_schema' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_decoder_struct_follows_the_schema_table() -> None:
    # The Spark task client's typed fetch decoder is made from the schema table.
    partition_type = decoder_struct(
        "Partition", FETCH_PARTITION_ANSWER, {"records": memoryview | None}
    )
    wire = encode_body({"partition": 3, "records": b"abc", "high_watermark": None, "extra": 1})
    decoded = msgspec.msgpack.Decoder(partition_type).decode(wire)
    assert decoded.partition == 3
    assert isinstance(decoded.records, memoryview) and bytes(decoded.records) == b"abc"
    assert decoded.high_watermark is None
    assert decoded.error is msgspec.UNSET  # absent: the caller fills the default
    with pytest.raises(msgspec.ValidationError, match="partition"):
        msgspec.msgpack.Decoder(partition_type).decode(encode_body({"records": b""}))
