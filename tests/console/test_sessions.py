"""Console sessions expire: after the idle timeout, and after the maximum age however busy."""

from __future__ import annotations

import trio
import trio.testing

from broker.console.sessions import MAX_SESSIONS, SESSION_MAX_AGE_S, SessionStore


async def test_an_idle_session_expires(autojump_clock: trio.testing.MockClock) -> None:
    store = SessionStore(idle_timeout_s=60)
    sid, session = store.create("User:alice")
    await trio.sleep(59)
    assert store.get(sid) is session  # and its idle clock restarts
    await trio.sleep(59)
    assert store.get(sid) is session
    await trio.sleep(61)
    assert store.get(sid) is None
    assert store.get(sid) is None


async def test_a_busy_session_still_ends_at_its_maximum_age(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = SessionStore(idle_timeout_s=3600)
    sid, _ = store.create("User:alice")
    waited = 0.0
    while waited < SESSION_MAX_AGE_S - 1800:
        await trio.sleep(1800)
        waited += 1800
        assert store.get(sid) is not None
    await trio.sleep(1801)
    assert store.get(sid) is None


async def test_ids_are_not_kept_and_the_table_is_bounded() -> None:
    store = SessionStore(idle_timeout_s=60)
    first, _ = store.create(None)
    assert first not in repr(store._sessions)  # only digests of the ids are stored
    for _ in range(MAX_SESSIONS):
        store.create(None)
    assert len(store) == MAX_SESSIONS
    assert store.get(first) is None  # the least recently used went first
    store.end("unknown")
    assert store.get("") is None
