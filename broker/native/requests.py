"""The msgpack protocol's request layer: a decoded frame in, a `Response` out.

`handle_request` parses the envelope (protocol/envelope.py), validates the body
against its schema (protocol/schemas.py), runs the API's handler from the dispatch
table and maps exceptions to codes. A `TidelogError` becomes its own code; anything
else becomes `UNKNOWN_SERVER_ERROR` for that request only, logged with its
traceback. The connection (broker/connection.py) frames what this returns.
"""

from __future__ import annotations

import time
from typing import Any

from broker import offload
from broker.context import Answer, BrokerContext, Deferred
from broker.dispatch import HANDLERS, failure, handler_for
from broker.logging import request_fields
from protocol.envelope import Response, error_response, parse_request, request_id_of
from protocol.schemas import validate_request


class PendingResponse:
    """The rest of a request whose handler returned `Deferred`; `resolve` never raises."""

    def __init__(
        self,
        ctx: BrokerContext,
        request_id: int,
        api: str,
        arrived: float,
        deferred: Deferred[Answer],
    ) -> None:
        self._ctx, self._id, self._api, self._arrived = ctx, request_id, api, arrived
        self._deferred = deferred

    async def resolve(self) -> Response:
        try:
            body = await self._deferred.finish()
            response, error = Response(id=self._id, body=body), first_answer_error(body)
        except Exception as exc:
            err = failure(self._api, exc)
            response, error = error_response(self._id, err), err.code
        self._ctx.request_finished(self._api, error, time.perf_counter() - self._arrived)
        return response


async def handle_request(
    ctx: BrokerContext, obj: Any, arrived: float, *, large: bool = False
) -> Response | PendingResponse | None:
    """The response to one decoded frame: None for `acks: 0` produce, pending for `acks: -1`.

    A `large` frame (priced over the event-loop budget, broker/offload.py) is
    validated in a worker thread: validation walks every object of the body.
    """
    request_id = request_id_of(obj)
    api = "unknown"
    try:
        request = parse_request(obj)
        api = request.api if request.api in HANDLERS else "unknown"
        if large:
            body = await offload.to_worker(validate_request, request)
        else:
            body = validate_request(request)
        handler = handler_for(request.api)
        with request_fields(api=request.api, request_id=request_id):
            result = await handler(ctx, body)
        if isinstance(result, Deferred):
            return PendingResponse(ctx, request_id, api, arrived, result)
        response = None if result is None else Response(id=request_id, body=result)
        error = None if result is None else first_answer_error(result)
    except Exception as exc:
        err = failure(api, exc)
        response, error = error_response(request_id, err), err.code
    ctx.request_finished(api, error, time.perf_counter() - arrived)
    return response


def first_answer_error(body: Answer) -> str | None:
    """The first per-topic or per-partition error name in a msgpack answer, for metrics.

    A request counts as failed with that code (Kafka's failed-request and
    per-error meters count partition errors too).
    """
    for topic in body.get("topics", ()):
        error: str | None = topic.get("error")
        if error:
            return error
        for part in topic.get("partitions", ()):
            if isinstance(part, dict) and part.get("error"):
                return str(part["error"])
    return None
