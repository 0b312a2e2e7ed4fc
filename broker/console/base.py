"""What every page handler gets: the request, the acting principal, the layout's view."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from broker.console.acting import Actor
from broker.console.http import Request, Response, redirect
from broker.console.render import View
from broker.context import BrokerContext
from compaction.service import CleanerService


@dataclass(frozen=True, slots=True)
class Broker:
    """The broker's parts the console reads beside the API table (set once it is up)."""

    ctx: BrokerContext
    cleaner: CleanerService | None
    started_ms: int


@dataclass(frozen=True, slots=True)
class Call:
    """One routed request."""

    request: Request
    actor: Actor
    view: View
    params: tuple[str, ...]
    broker: Broker

    @property
    def ctx(self) -> BrokerContext:
        return self.broker.ctx


Page = Callable[[Call], Awaitable[Response]]


def back(location: str, *, notice: str = "", problem: str = "") -> Response:
    """Redirect after a form (POST/redirect/GET), with what happened for the next page."""
    sep = "&" if "?" in location else "?"
    params = {k: v for k, v in (("notice", notice), ("problem", problem)) if v}
    return redirect(location + (sep + urlencode(params) if params else ""))


def int_arg(call: Call, name: str, default: int, low: int, high: int) -> int:
    """An integer field clamped to [low, high] (the default when absent or not a number)."""
    try:
        value = int(call.request.arg(name, str(default)) or default)
    except ValueError:
        value = default
    return min(max(value, low), high)
