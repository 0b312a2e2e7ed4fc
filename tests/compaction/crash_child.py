"""A child process for the cleaner crash tests (run with `python -m`).

    python -m tests.compaction.crash_child build DIR   make a dirty compacted log in DIR/data
    python -m tests.compaction.crash_child clean DIR   clean it once (failpoints from env)
    python -m tests.compaction.crash_child load DIR    append and clean forever, writing each
                                                       acknowledged append to DIR/ledger

The parent SIGKILLs it (or a failpoint does) and then checks the directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.compaction.helpers import (
    Clock,
    append,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
)

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "3000",
    "delete.retention.ms": "0",
    "min.cleanable.dirty.ratio": "0.01",
}
KEYS = 12


def build(root: Path, records: int = 400) -> None:
    data_dir = root / "data"
    clock = Clock()
    logs = open_manager(data_dir, clock)
    logs.create_topic("t", 1, TOPIC_CONFIG)
    log = logs.get_log("t", 0)
    for i in range(records):
        value = None if i % 37 == 0 else b"value-%d" % i
        append(log, [(b"key-%d" % (i % KEYS), value)], clock())
    log.roll()
    logs.close()


def clean(root: Path) -> None:
    data_dir = root / "data"
    clock = Clock()
    logs = open_manager(data_dir, clock)
    cleaners = make_cleaner_manager(logs, clock)
    result = cleaners.clean_one(make_cleaner())
    print("cleaned" if result is not None else "nothing", flush=True)
    logs.close()


def load(root: Path) -> None:
    data_dir = root / "data"
    clock = Clock()
    logs = open_manager(data_dir, clock)
    if "t" not in logs.topics():
        logs.create_topic("t", 1, TOPIC_CONFIG)
    log = logs.get_log("t", 0)
    cleaners = make_cleaner_manager(logs, clock)
    cleaner = make_cleaner()
    with open(root / "ledger", "a", buffering=1) as ledger:
        print("ready", flush=True)
        i = 0
        while True:
            for _ in range(50):
                key, value = b"key-%d" % (i % KEYS), b"v-%d-%d" % (os.getpid(), i)
                offset = append(log, [(key, value)], clock())
                ledger.write(f"{offset} {key.decode()} {value.decode()}\n")
                i += 1
            log.roll()
            cleaners.clean_one(cleaner)


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    {"build": build, "clean": clean, "load": load}[mode](directory)
