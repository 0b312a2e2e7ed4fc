"""The API handlers, one module per family: topics (and configs), produce, fetch,
offsets (over partitions), group_offsets (commit/fetch offsets), explain (retention).

A handler is `async def api(ctx: BrokerContext, body) -> answer | Deferred | None`:
`body` is the validated request (protocol/schemas.py), the answer a dict a codec
encodes. Handlers know nothing of bytes, frames or envelopes (tests/test_layering.py
checks that none imports protocol.framing); broker/dispatch.py maps API names to them.
"""
