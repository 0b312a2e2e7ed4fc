"""Named failpoints for crash tests: kill the process or fail an I/O call at an exact step.

Configured only from the environment variable `TIDELOG_FAILPOINTS`, read once at
import (the one place below `broker/` that reads the environment, on purpose:
crash tests must reach a real subprocess without any config plumbing)::

    TIDELOG_FAILPOINTS="segment.append.after_write=kill@3,checkpoint.before_rename=eio"

Each entry is `<point>=<action>[@<hit>]`. Actions:

- `kill`: SIGKILL this process (no `finally`, no atexit: what a real crash looks like);
- `eio` / `enospc`: raise OSError with that errno;
- `partial`: at a write point, write the first half of the buffer, then SIGKILL.

`@<hit>` fires on the n-th hit only (1-based); without it, on every hit. When the
variable is unset, `hit()` is one falsy check.
"""

from __future__ import annotations

import errno
import os
import signal
import threading

ENV_VAR = "TIDELOG_FAILPOINTS"
ACTIONS = frozenset({"kill", "eio", "enospc", "partial"})

# Every point the storage engine hits. Crash tests sweep this set.
POINTS = frozenset(
    {
        "segment.append.before_write",
        "segment.append.write",  # the write itself: `partial` applies here
        "segment.append.after_write",
        "log.append.after_index",
        "log.flush.before_fsync",
        "log.flush.after_fsync",
        "log.roll.before_new_segment",
        "log.roll.after_old_trimmed",
        "log.roll.after_new_log",
        "log.delete_segments.after_rename",
        "checkpoint.before_write",
        "checkpoint.before_rename",
        "checkpoint.after_rename",
        "topic_metadata.before_write",
        "topic_metadata.before_rename",
        "topic_metadata.after_rename",
        "recovery.after_truncate",
        "replace_segments.after_swap_rename",
        "replace_segments.after_old_deleted",
    }
)

_lock = threading.Lock()
# point -> (action, hit number or 0 for every hit); plus counters
_config: dict[str, tuple[str, int]] = {}
_hits: dict[str, int] = {}


# Prefixes of storage's own points: a name with one of them must be in POINTS (typos fail
# loudly). Other packages (compaction, ...) name their points freely and call hit() too.
STORAGE_PREFIXES = tuple(sorted({point.split(".")[0] + "." for point in POINTS}))


def parse(spec: str) -> dict[str, tuple[str, int]]:
    """Parse `name=action[@n],...`; raises ValueError on a bad entry."""
    parsed: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, rest = item.partition("=")
        action, _, count = rest.partition("@")
        unknown = name.startswith(STORAGE_PREFIXES) and name not in POINTS
        if not sep or "." not in name or unknown or action not in ACTIONS:
            raise ValueError(f"bad failpoint {item!r} (storage points: {sorted(POINTS)})")
        if count and (not count.isdigit() or int(count) < 1):
            raise ValueError(f"bad failpoint hit count in {item!r}")
        parsed[name] = (action, int(count) if count else 0)
    return parsed


def configure(spec: str) -> None:
    """Replace the active failpoints (tests in-process; the env var at import)."""
    global _config
    with _lock:
        _config = parse(spec)
        _hits.clear()


def _fire(name: str) -> str | None:
    with _lock:
        entry = _config.get(name)
        if entry is None:
            return None
        count = _hits[name] = _hits.get(name, 0) + 1
        action, at = entry
        if at and count != at:
            return None
    return action


def kill_now() -> None:
    """SIGKILL this process; never returns."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit("unreachable: SIGKILL did not stop the process")


def hit(name: str) -> str | None:
    """Run the action configured for `name`, if any.

    Returns "partial" for the caller to act on (only write points do); kills or
    raises for the other actions; None when nothing is configured.
    """
    if not _config:
        return None
    action = _fire(name)
    if action is None:
        return None
    if action == "kill":
        kill_now()
    if action == "eio":
        raise OSError(errno.EIO, f"failpoint {name}")
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"failpoint {name}")
    return action


configure(os.environ.get(ENV_VAR, ""))
