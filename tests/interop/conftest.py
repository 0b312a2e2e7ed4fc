"""The interop suite: real Apache Kafka brokers on loopback, real Kafka clients.

Collected only when asked for (`make interop`, i.e. `pytest -m interop tests/interop`,
or any path inside this directory): it needs Maven, Java 17, kcat and the `interop`
extra, and takes minutes, so `make test` leaves it out.

`kafka` is one broker for the whole session; `kafka_b` a second, independent one for
the Kafka-vs-Kafka differential tests. Both are stopped (by PID) at the end.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interop.targets import Target, open_target

# kafka-python 3.0 builds its protocol classes at import time with a deprecated
# importlib.resources call; the suite turns warnings into errors, so import it here once
# with that one warning silenced (a third party's, not ours).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    import interop.scenarios  # noqa: F401

HERE = Path(__file__).resolve().parent
SELECTS_INTEROP = re.compile(r"(?<!not )\binterop\b")
_counter = itertools.count()


def _requested(config: pytest.Config) -> bool:
    """Whether the run asks for this suite: `-m interop`, or a path inside it."""
    # `-m interop` asks for it; `-m "not interop"` does not.
    if SELECTS_INTEROP.search(config.getoption("markexpr") or ""):
        return True
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name.startswith("test_") and not _requested(config):
        return True
    return None


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target("kafka", tmp_path_factory.mktemp("kafka-a")) as target:
        yield target


@pytest.fixture(scope="session")
def kafka_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target("kafka", tmp_path_factory.mktemp("kafka-b")) as target:
        yield target


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Fresh topic / group names: every test gets its own, so tests never share state."""

    def make(prefix: str) -> str:
        return f"{prefix}-{next(_counter)}"

    return make
