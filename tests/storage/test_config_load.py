"""Topic overrides stored by an older broker are validated again at load.

Before issue 23 finding 3 was fixed, `alter_configs` stored values above int64
(e.g. `retention.bytes` = 2**63). A data directory holding one must still open:
where int64's top means "no limit", the override is clamped to it (the meaning
its owner gave) and a log event names it, instead of failing every start or every
describe; any other invalid override leaves the topic unloaded, its data untouched
(tests/storage/test_fd_budget.py), never falling back to a default that deletes.
"""

from __future__ import annotations

import json
from pathlib import Path

from structlog.testing import capture_logs

from storage.config import LogConfig
from storage.files import TOPIC_METADATA_SUFFIX, TOPICS_DIR
from storage.manager import LogManager

TOO_BIG = str(2**63)


def _store_override(data_dir: Path, topic: str, key: str, value: str) -> None:
    path = data_dir / TOPICS_DIR / f"{topic}{TOPIC_METADATA_SUFFIX}"
    meta = json.loads(path.read_text(encoding="utf-8"))
    meta["configs"][key] = value
    path.write_text(json.dumps(meta), encoding="utf-8")


def test_out_of_range_stored_override_is_clamped_at_load(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    manager.open()
    manager.create_topic("t", 1, {"retention.ms": "1000"})
    manager.close()
    _store_override(tmp_path, "t", "retention.bytes", TOO_BIG)

    reopened = LogManager(tmp_path, LogConfig())
    with capture_logs() as events:
        reopened.open()
    try:
        assert reopened.topic_overrides("t") == {
            "retention.ms": "1000",
            "retention.bytes": str(2**63 - 1),
        }
        assert reopened.get_log("t", 0).config.retention_bytes == 2**63 - 1
        assert reopened.get_log("t", 0).config.retention_ms == 1000
        dropped = [e for e in events if e["event"] == "topic_config_clamped"]
        assert len(dropped) == 1 and dropped[0]["key"] == "retention.bytes"
        assert dropped[0]["value"] == TOO_BIG and "9223372036854775807" in dropped[0]["error"]
    finally:
        reopened.close()
