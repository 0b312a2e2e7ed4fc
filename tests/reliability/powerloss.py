"""Power-loss simulation over the fsync journal of `powerloss_site/sitecustomize.py`.

After a SIGKILL the page cache still holds every write; a power cut would not. `cut_power`
brings the data directory back to what was fsynced: each file is truncated to its
last fsynced length (or its length at the previous power cut when it was not synced
since), garbage is appended to segment logs past that point (torn sectors, as
SQLite's crash VFS writes), indexes never fsynced lose their pages, and, with
`drop_unsynced_entries`, files whose directory entry was never fsynced disappear.
Then `Baseline.take` makes the result the new durable state for the next cycle.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

SITE_DIR = Path(__file__).resolve().parent / "powerloss_site"
JOURNAL_ENV = "TIDELOG_TEST_FSYNC_JOURNAL"
# Most garbage bytes appended after a cut log (a torn sector is at most a few KiB).
MAX_GARBAGE_BYTES = 300
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def journal_env(journal: Path) -> dict[str, str]:
    """Environment for a broker that journals its fsyncs into `journal`."""
    root = str(SITE_DIR.parents[2])
    path = os.pathsep.join(filter(None, [str(SITE_DIR), root, os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, JOURNAL_ENV: str(journal)}


@dataclass
class Baseline:
    """What was durable at the previous power cut: sizes by inode, entries by directory."""

    sizes: dict[int, int] = field(default_factory=dict)
    entries: set[tuple[str, str, int]] = field(default_factory=set)

    @classmethod
    def take(cls, data_dir: Path) -> Baseline:
        baseline = cls()
        for path in _files(data_dir):
            st = path.stat()
            baseline.sizes[st.st_ino] = st.st_size
        for directory in [data_dir, *(p for p in data_dir.rglob("*") if p.is_dir())]:
            for entry in os.scandir(directory):
                baseline.entries.add((str(directory), entry.name, entry.inode()))
        return baseline


def _files(data_dir: Path) -> list[Path]:
    return [p for p in data_dir.rglob("*") if p.is_file()]


def read_journal(journal: Path) -> tuple[dict[int, int], set[tuple[str, str, int]]]:
    synced: dict[int, int] = {}
    entries: set[tuple[str, str, int]] = set()
    if not journal.exists():
        return synced, entries
    # The last record may be torn: a record of a few KiB (a directory's entries) is cut
    # short when the SIGKILL lands during its write(). Its fsync had returned but the
    # wrapper had not, so the broker acknowledged nothing that relied on it: drop it.
    *complete, _torn_or_empty = journal.read_text().split("\n")
    for line in complete:
        kind, _, rest = line.partition(" ")
        if kind == "F":
            inode, size = rest.split()
            synced[int(inode)] = int(size)
        elif kind == "D":
            directory, *names = rest.split("\t")
            for item in names:
                name, _, inode = item.rpartition("/")
                entries.add((directory, name, int(inode)))
    return synced, entries


def cut_power(
    data_dir: Path,
    journal: Path,
    baseline: Baseline,
    rng: random.Random,
    *,
    drop_unsynced_entries: bool,
) -> dict[str, int]:
    """Reduce `data_dir` to its durable state; returns counts of what was done."""
    synced, entries = read_journal(journal)
    entries |= baseline.entries
    done = {"truncated": 0, "garbage": 0, "dropped": 0, "indexes_lost": 0}
    for path in _files(data_dir):
        st = path.stat()
        if drop_unsynced_entries and (str(path.parent), path.name, st.st_ino) not in entries:
            path.unlink()
            done["dropped"] += 1
            continue
        durable = synced.get(st.st_ino, baseline.sizes.get(st.st_ino))
        if durable is None:
            # Never fsynced, not there at the last cut: nothing of it is durable.
            if path.name.endswith(INDEX_SUFFIXES):
                # An active segment's index (a round fsyncs only the `.log`): its pages
                # are lost, its preallocated length kept or not. Recovery rebuilds it.
                if rng.random() < 0.5:
                    path.write_bytes(bytes(st.st_size))
                else:
                    path.write_bytes(b"")
                done["indexes_lost"] += 1
                continue
            if not path.name.endswith(LOG_SUFFIX):
                continue  # markers: written atomically or rebuilt; left as they are
            durable = 0
        if durable < st.st_size:
            with open(path, "r+b") as f:
                f.truncate(durable)
                done["truncated"] += 1
                if path.name.endswith(LOG_SUFFIX) and rng.random() < 0.7:
                    f.seek(durable)
                    f.write(rng.randbytes(rng.randint(1, MAX_GARBAGE_BYTES)))
                    done["garbage"] += 1
    journal.unlink(missing_ok=True)
    return done
