from __future__ import annotations

import pytest

from storage import failpoints


@pytest.fixture(autouse=True)
def _no_failpoints():
    """In-process failpoints never leak from one test into the next."""
    failpoints.configure("")
    yield
    failpoints.configure("")
