"""Client quotas on the Kafka path: what each answer counts against its client's quotas.

Kafka's rules (its `KafkaApis` with `ClientQuotaManager` and
`ClientRequestQuotaManager`), applied by the connection's codec around every adapter:

- Produce counts the request's size against `producer_byte_rate` once answered
  (acks=0 included, which gets no answer but is still muted);
- Fetch is first capped to what one window allows (`max_in_window`), then counts
  its answer's record bytes against `consumer_byte_rate`; an answer over the quota
  is taken back and sent without records (Kafka's throttled fetch answer);
- every request but Produce with acks=0 counts its time against
  `request_percentage`: the event-loop thread's CPU time while the adapter ran, in
  percent of one second (work offloaded to worker threads is not counted, and other
  connections' work done while it waited is: an approximation of Kafka's request
  handler thread time, see docs/kafka.md "Client quotas"), its throttle at most one
  window (Kafka's `ClientRequestQuotaManager`);
- the answer carries the larger throttle time in `throttle_time_ms`, and the
  connection handles nothing more for that long (KIP-219's muted channel).

Nothing is measured while no quota is set.
"""

from __future__ import annotations

import time

import trio

from broker.context import BrokerContext, ConnectionState, Deferred
from broker.kafka.call import KafkaAnswer
from broker.quotas.limits import ClientQuotas
from broker.quotas.store import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from broker.security.acl import ANONYMOUS
from broker.security.session import current_session
from protocol.kafka.codec import KafkaRequest
from protocol.kafka.messages import FETCH, PRODUCE
from storage.record_source import RecordSource

NANOS_TO_PERCENT = 100.0 / 1e9
_PRINCIPAL_TYPE = "User:"


def _identity(request: KafkaRequest) -> tuple[str, str]:
    """The quota user (the principal's name, as Kafka's) and client id of a request."""
    session = current_session()
    principal = session.principal if session is not None else ANONYMOUS
    return principal.removeprefix(_PRINCIPAL_TYPE), request.header.client_id or ""


async def wait_unmuted(state: ConnectionState) -> None:
    """Hold the connection's next request until its throttle time has passed."""
    if state.muted_until > trio.current_time():
        await trio.sleep_until(state.muted_until)


def _mute(state: ConnectionState, throttle_ms: int) -> None:
    state.muted_until = max(state.muted_until, trio.current_time() + throttle_ms / 1000.0)


def cap_fetch(quotas: ClientQuotas, request: KafkaRequest) -> None:
    """A Fetch asks for no more than its consumer quota allows in one window."""
    if not quotas.active or request.api.key != FETCH.key:
        return
    most = quotas.max_in_window(CONSUMER_BYTE_RATE, *_identity(request))
    if most is not None:
        request.body["max_bytes"] = max(1, min(request.body["max_bytes"], int(most)))


def _fetched_bytes(answer: KafkaAnswer) -> int:
    topics = answer.get("responses", [])
    return sum(len(p["records"] or b"") for t in topics for p in t["partitions"])


def _release_records(answer: KafkaAnswer) -> None:
    """Close the file spans of a fetch answer that will not be sent (a throttled one):
    each holds a descriptor and a slot of the open-span budget."""
    for topic in answer.get("responses", []):
        for partition in topic["partitions"]:
            if isinstance(partition["records"], RecordSource):
                partition["records"].close()


class Measured:
    """One request's use of its client's quotas, from the adapter's start to its answer."""

    def __init__(
        self, ctx: BrokerContext, state: ConnectionState, request: KafkaRequest, request_bytes: int
    ) -> None:
        self._quotas, self._state, self._request = ctx.quotas, state, request
        self._request_bytes = request_bytes
        self._started_ns = time.thread_time_ns()
        self._cpu_ns = 0

    def adapter_returned(self) -> None:
        self._cpu_ns = time.thread_time_ns() - self._started_ns

    def apply(self, answer: KafkaAnswer | None) -> KafkaAnswer | None:
        """`answer` with its throttle time (a throttled fetch's without records); the
        connection muted for that time."""
        quotas, request = self._quotas, self._request
        user, client = _identity(request)
        bandwidth = 0
        if request.api.key == PRODUCE.key:
            bandwidth = quotas.record(PRODUCER_BYTE_RATE, user, client, self._request_bytes)
        elif request.api.key == FETCH.key and answer is not None:
            size = _fetched_bytes(answer)
            bandwidth = quotas.record(CONSUMER_BYTE_RATE, user, client, size)
            if bandwidth:
                quotas.unrecord(CONSUMER_BYTE_RATE, user, client, size)
                _release_records(answer)
                answer = {**answer, "responses": [], "error_code": 0}
        busy = 0
        if answer is not None or request.api.key != PRODUCE.key:
            percent = self._cpu_ns * NANOS_TO_PERCENT
            busy = min(quotas.record(REQUEST_PERCENTAGE, user, client, percent), quotas.window_ms)
        throttle = max(bandwidth, busy)
        if throttle:
            _mute(self._state, throttle)
            if answer is not None:
                answer = {**answer, "throttle_time_ms": throttle}
        return answer


def measured(
    ctx: BrokerContext, state: ConnectionState, request: KafkaRequest, request_bytes: int
) -> Measured | None:
    """A `Measured` for this request, or None while no quota is set."""
    return Measured(ctx, state, request, request_bytes) if ctx.quotas.active else None


Result = KafkaAnswer | Deferred[KafkaAnswer] | None


def throttled(measure: Measured | None, result: Result) -> Result:
    """The adapter's result with its quotas applied (a Deferred once it finishes)."""
    if measure is None:
        return result
    measure.adapter_returned()
    if isinstance(result, Deferred):
        inner = result

        async def finish() -> KafkaAnswer:
            answer = measure.apply(await inner.finish())
            assert answer is not None
            return answer

        return Deferred(finish)
    return measure.apply(result)
