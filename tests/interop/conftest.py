"""The interop suite: real Apache Kafka brokers on loopback, real Kafka clients.

Collected only when asked for (`make interop`, i.e. `pytest -m interop tests/interop`,
or any path inside this directory; the rule is in tests/conftest.py, so that this file,
which imports the Kafka clients of the `interop` extra, is not even loaded otherwise): it
needs Maven, Java 17, kcat and that extra, and takes minutes, so `make test` leaves it out.

`kafka` is one broker for the whole session; `kafka_b` a second, independent one for
the Kafka-vs-Kafka differential tests; `tidelog` is Tidelog's broker, the target the
differential tests compare with Apache Kafka. All are stopped (by PID) at the end.
"""

from __future__ import annotations

import itertools
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
_counter = itertools.count()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target("kafka", tmp_path_factory.mktemp("kafka-a")) as target:
        yield target


@pytest.fixture(scope="session")
def kafka_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with open_target("kafka", tmp_path_factory.mktemp("kafka-b")) as target:
        yield target


@pytest.fixture(scope="session")
def kafka_tv1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """Kafka at transaction.version=1: the transactional differential tests' oracle, since
    Tidelog finalizes no transaction.version (clients then speak KIP-890 part 1 only)."""
    with open_target("kafka-tv1", tmp_path_factory.mktemp("kafka-tv1")) as target:
        yield target


@pytest.fixture(scope="session")
def tidelog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """Tidelog's broker, speaking Kafka's protocol on its usual port."""
    with open_target("tidelog", tmp_path_factory.mktemp("tidelog")) as target:
        yield target


@pytest.fixture
def unique() -> Callable[[str], str]:
    """Fresh topic / group names: every test gets its own, so tests never share state."""

    def make(prefix: str) -> str:
        return f"{prefix}-{next(_counter)}"

    return make
