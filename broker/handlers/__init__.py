"""The API handlers, one module per family: topics (and configs), produce, fetch,
offsets (over partitions), group_offsets (commit/fetch offsets), explain (retention).

A handler is `async def api(ctx: BrokerContext, body: ApiRequest) -> ApiAnswer` (or
`| Deferred[ApiAnswer] | None`): `body` is the validated request, the answer a dict a
codec encodes, both typed by the TypedDicts protocol/api_types.py generates from the
schema table (mypy checks them: `make lint`). Handlers know nothing of bytes, frames or
envelopes (tests/test_layering.py checks that none imports protocol.framing);
broker/dispatch.py maps API names to them.
"""
