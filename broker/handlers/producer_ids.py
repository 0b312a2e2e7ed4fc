"""The init_producer_id API: an id and epoch for an idempotent producer
(storage.producer_ids has the rules; docs/protocol.md the wire form).

The first id of each block of 1000 costs an fsync of `producer-id-block`, so the
call runs in a worker thread: it never stalls the event loop on a slow disk.
"""

from __future__ import annotations

from broker import offload
from broker.context import BrokerContext
from broker.logging import get_logger
from protocol.api_types import InitProducerIdAnswer, InitProducerIdRequest

log = get_logger(component="handlers")


async def init_producer_id(ctx: BrokerContext, body: InitProducerIdRequest) -> InitProducerIdAnswer:
    granted = await offload.to_worker(
        lambda: ctx.manager.producer_ids.init_producer_id(
            body["producer_id"], body["producer_epoch"], body["transactional_id"]
        )
    )
    log.info(
        "producer_id_granted",
        producer_id=granted.producer_id,
        producer_epoch=granted.epoch,
        previous_producer_id=body["producer_id"],
    )
    return {"producer_id": granted.producer_id, "producer_epoch": granted.epoch}
