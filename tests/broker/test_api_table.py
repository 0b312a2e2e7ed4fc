"""One table of APIs: every schema registered in one place, whatever is imported first,
and the broker's dispatch table answering exactly those names."""

from __future__ import annotations

import subprocess
import sys

from broker.dispatch import HANDLERS
from protocol.schemas import API_VERSIONS, APIS


def test_dispatch_table_and_schema_table_name_the_same_apis() -> None:
    assert set(HANDLERS) == set(APIS) == set(API_VERSIONS)


def test_extension_apis_validate_without_importing_their_modules() -> None:
    # A fresh interpreter that imports only the schema table: the extension APIs are
    # there (they used to appear only once protocol.offsets_schema had been imported).
    probe = (
        "import sys\n"
        "from protocol.schemas import validate_request_body\n"
        "body = validate_request_body('commit_offsets', {'group': 'g', 'topics': []})\n"
        "assert body == {'group': 'g', 'topics': []}, body\n"
        "assert validate_request_body('explain_retention', {'topic': 't'})['partitions'] is None\n"
        "assert 'protocol.offsets_schema' not in sys.modules\n"
        "assert 'protocol.retention_schema' not in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
