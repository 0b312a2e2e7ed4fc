from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys

import pytest

from storage import failpoints


def test_parse_accepts_known_points_and_counts() -> None:
    parsed = failpoints.parse("segment.append.after_write=kill@3, checkpoint.before_rename=eio")
    assert parsed == {
        "segment.append.after_write": ("kill", 3),
        "checkpoint.before_rename": ("eio", 0),
    }


@pytest.mark.parametrize(
    "spec",
    [
        "nope=kill",
        "segment.append.after_wirte=kill",
        "segment.append.after_write=explode",
        "segment.append.after_write=kill@0",
        "x",
    ],
)
def test_parse_rejects_unknown(spec: str) -> None:
    with pytest.raises(ValueError):
        failpoints.parse(spec)


def test_other_packages_points_are_accepted() -> None:
    assert failpoints.parse("compaction.after_cleaned_fsync=kill@2") == {
        "compaction.after_cleaned_fsync": ("kill", 2)
    }


def test_unset_points_do_nothing() -> None:
    assert failpoints.hit("segment.append.after_write") is None


def test_errno_actions_fire_on_the_nth_hit_only() -> None:
    failpoints.configure("checkpoint.before_rename=enospc@2")
    assert failpoints.hit("checkpoint.before_rename") is None
    with pytest.raises(OSError) as info:
        failpoints.hit("checkpoint.before_rename")
    assert info.value.errno == errno.ENOSPC
    assert failpoints.hit("checkpoint.before_rename") is None


def test_partial_is_returned_to_the_write_site() -> None:
    failpoints.configure("segment.append.write=partial")
    assert failpoints.hit("segment.append.write") == "partial"


def test_kill_sends_sigkill_from_the_environment() -> None:
    code = (
        "from storage import failpoints; failpoints.hit('log.roll.after_new_log'); print('alive')"
    )
    env = {**os.environ, failpoints.ENV_VAR: "log.roll.after_new_log=kill"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert b"alive" not in done.stdout
