"""The list_transactions handler (schema in protocol/transactions_schema.py): what the
transaction coordinator knows, for `tidelog transactions list|describe`."""

from __future__ import annotations

from broker.context import BrokerContext
from protocol import api_types as wire


async def list_transactions(
    ctx: BrokerContext, body: wire.ListTransactionsRequest
) -> wire.ListTransactionsAnswer:
    service = ctx.transactions
    await service.load()
    names = body["transactional_ids"]
    states = set(body["states"])
    metas = service.transactions()
    if names is not None:
        wanted = set(names)
        metas = [m for m in metas if m.transactional_id in wanted]
    answer: list[wire.ListTransactionsTransactionAnswer] = [
        {
            "transactional_id": meta.transactional_id,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "state": meta.state.kafka_name,
            "timeout_ms": meta.timeout_ms,
            "start_ms": meta.start_ms,
            "last_update_ms": meta.last_update_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(meta.partitions)],
        }
        for meta in metas
        if not states or meta.state.kafka_name in states
    ]
    return {"transactions": answer}
