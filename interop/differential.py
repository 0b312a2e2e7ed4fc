"""Run one client scenario on two targets and say where their clients' views differ.

    differences = run_differential("confluent-kafka", "group_consume", kafka, tidelog)

Each run gets its own topic and group names (so both runs may share one broker); the
names are mapped back to placeholders by `interop.compare` before diffing.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from interop.compare import compare_runs
from interop.scenarios import CLIENTS, SCENARIO_NAMES

# The codec the differential produce/consume uses when none is given: the one with the
# most moving parts (xerial framing differs between clients).
DEFAULT_CODEC = "snappy"
_runs = itertools.count()


def supported(client: str) -> tuple[str, ...]:
    """The scenarios `client` can run (kcat has no admin commands)."""
    return tuple(getattr(CLIENTS[client], "SUPPORTED", SCENARIO_NAMES))


def run_scenario(
    client: str, scenario: str, bootstrap: str, codec: str = DEFAULT_CODEC
) -> tuple[Any, dict[str, str]]:
    """What `client` observed running `scenario` against `bootstrap`, and the run's names
    (actual -> placeholder) for `compare_runs`."""
    tag = f"{os.getpid()}-{next(_runs)}"
    topic = f"diff-{scenario.replace('_', '-')}-{tag}"
    group = f"diff-group-{tag}"
    fn = getattr(CLIENTS[client], scenario)
    if scenario == "produce_consume":
        observed = fn(bootstrap, topic, codec)
    elif scenario.startswith("group_"):
        observed = fn(bootstrap, topic, group)
    else:
        observed = fn(bootstrap, topic)
    return observed, {topic: "<topic>", group: "<group>"}


def run_differential(
    client: str, scenario: str, first: str, second: str, codec: str = DEFAULT_CODEC
) -> list[str]:
    """Differences between the two targets' observations (empty when they agree)."""
    a, a_names = run_scenario(client, scenario, first, codec)
    b, b_names = run_scenario(client, scenario, second, codec)
    return compare_runs(a, a_names, b, b_names)
