"""Store calls off the event loop: `trio.to_thread.run_sync` under one limiter.

boto3 blocks; every call goes to a worker thread, and at most
`tidelog.remote.storage.threads` run at once (their own `trio.CapacityLimiter`, apart
from the request path's: a slow store then queues store calls, never the fetches and
produces of local data).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

import trio

from storage.remote import (
    BlockingObjectStore,
    ObjectStore,
    RemoteStoreSettings,
    RunSync,
    load_credentials,
)

__all__ = ["open_object_store", "settings_with_credentials", "trio_run_sync"]

T = TypeVar("T")


def trio_run_sync(limiter: trio.CapacityLimiter) -> RunSync:
    """A RunSync that runs each call in a trio worker thread under `limiter`.

    Cancellation waits for the thread (abandon_on_cancel=False): a store call always
    finishes or fails before its caller unwinds, so no upload is half-recorded."""

    def run(fn: Callable[[], T], /) -> Awaitable[T]:
        return trio.to_thread.run_sync(fn, limiter=limiter)

    return run


def open_object_store(settings: RemoteStoreSettings, limiter: trio.CapacityLimiter) -> ObjectStore:
    """An async store over boto3 for `settings` (credentials resolved already)."""
    return ObjectStore(BlockingObjectStore(settings), trio_run_sync(limiter))


def settings_with_credentials(
    settings: RemoteStoreSettings, credentials_file: str
) -> RemoteStoreSettings:
    """`settings` with the credentials of the file or the process environment."""
    return replace(settings, credentials=load_credentials(credentials_file, os.environ))
