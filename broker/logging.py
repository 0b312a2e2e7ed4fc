"""Structured logs: structlog JSON lines on stdout, a readable console on a TTY.

The broker logs events a person will ask about (startup with bound addresses,
shutdown, topic and config changes, client errors, recovery), never one line per
request. Context such as `conn_id`, `peer`, `topic` and `partition` is bound with
`structlog.contextvars`, so each trio task carries its own copy; the `api` and
`request_id` of the request a task serves come from `request_fields`, which costs
one ContextVar set per request. Standard-library loggers (storage, trio, third
parties) are bridged into the same output.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Literal, TextIO

import structlog
import structlog.tracebacks

LogFormat = Literal["auto", "json", "console"]

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# Keys never written to a log line, whatever a caller binds (SE-03 hygiene).
REDACTED_KEY_PARTS = ("password", "secret", "token", "sasl.")


# The fields of the request a task is serving (api, request id, protocol), added to
# every line it logs. One ContextVar set and reset per request: structlog's
# `bound_contextvars` costs ~4 us a request (it copies the whole context twice), ~1% of
# the broker's produce capacity, for lines that are rarely written.
_REQUEST_FIELDS: ContextVar[dict[str, Any] | None] = ContextVar("tidelog_request", default=None)


class request_fields:
    """`with request_fields(api=..., request_id=...):` puts the fields on the lines
    logged inside (and in tasks and threads started inside); a key the line sets wins."""

    __slots__ = ("_fields", "_token")

    def __init__(self, **fields: Any) -> None:
        self._fields = fields
        self._token: Token[dict[str, Any] | None] | None = None

    def __enter__(self) -> None:
        self._token = _REQUEST_FIELDS.set(self._fields)

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        assert self._token is not None
        _REQUEST_FIELDS.reset(self._token)


def _merge_request_fields(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    fields = _REQUEST_FIELDS.get()
    return event if fields is None else {**fields, **event}


def _redact(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for key in event:
        if any(part in key.lower() for part in REDACTED_KEY_PARTS):
            event[key] = "[redacted]"
    return event


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        _merge_request_fields,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        _redact,
    ]


def _renderer(fmt: LogFormat, stream: TextIO) -> Any:
    use_console = fmt == "console" or (fmt == "auto" and stream.isatty())
    if use_console:
        return structlog.dev.ConsoleRenderer(colors=False)
    return structlog.processors.JSONRenderer(sort_keys=False)


# Structured tracebacks without local variables: structlog's default shows them, and a
# frame's locals can hold record keys and values or a config secret the redaction
# processor never sees (it only looks at event keys).
_JSON_TRACEBACKS = structlog.processors.ExceptionRenderer(
    structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
)


def configure_logging(
    *, fmt: LogFormat = "auto", level: str = "info", stream: TextIO | None = None
) -> None:
    """Route structlog and stdlib logging to `stream` (stdout by default).

    JSON lines unless `fmt` is "console", or "auto" and the stream is a terminal.
    Each line is flushed as written so a supervisor (or a test) reading the pipe
    sees startup events at once.
    """
    out = stream if stream is not None else sys.stdout
    level_no = LEVELS[level.lower()]
    renderer = _renderer(fmt, out)
    exception_processor: Any = (
        _JSON_TRACEBACKS
        if isinstance(renderer, structlog.processors.JSONRenderer)
        else structlog.processors.format_exc_info
    )
    structlog.configure(
        processors=[*_shared_processors(), exception_processor, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *_shared_processors()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                exception_processor,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_tidelog", False):
            root.removeHandler(old)
    handler._tidelog = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level_no)


def get_logger(**initial: Any) -> Any:
    """A structlog logger with `initial` bound (e.g. `component="server"`)."""
    return structlog.get_logger(**initial)
