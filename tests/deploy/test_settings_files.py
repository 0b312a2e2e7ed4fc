"""deploy/server.properties and the docs' config tables are what the declarations render.

`deploy/build_settings.py` writes them from the `Setting` rows; a change to a
declaration without a re-run (or a hand edit of a generated file) fails here.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD = runpy.run_path(str(ROOT / "deploy" / "build_settings.py"))


@pytest.mark.parametrize(
    "path",
    sorted(BUILD["rendered_files"]()),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_committed_file_is_what_the_declarations_render(path: Path) -> None:
    expected = BUILD["rendered_files"]()[path]
    assert path.read_text(encoding="utf-8") == expected, "run python deploy/build_settings.py"


def test_check_mode_reports_no_stale_file() -> None:
    assert BUILD["main"](["--check"]) == 0


def test_every_broker_and_topic_key_has_a_table_row() -> None:
    from broker.config import VALID_KEYS
    from storage.config import TOPIC_CONFIG_DEFS

    tables = "".join(BUILD["render_tables"]().values())
    properties = BUILD["render_properties"]()
    for key in TOPIC_CONFIG_DEFS:
        assert f"| `{key}` |" in tables, key
    for key in VALID_KEYS:
        assert f"{key}=" in properties, key


def test_splice_needs_its_markers() -> None:
    with pytest.raises(ValueError, match="no markers"):
        BUILD["splice"]("no table here\n", "topic-configs", "| x |\n")
