"""Kafka's InitProducerId (API 22, v0-5): idempotent producers and transactional ones.

Without a transactional id the answer comes from Tidelog's init_producer_id handler:
a fresh id at epoch 0, as Kafka's coordinator gives an idempotent producer (v3+'s
previous producer id and epoch matter only with a transactional id: Kafka, too,
gives a producer without one a new id). With one, the transaction coordinator answers
(broker/transactions/): an epoch bump that fences the older instance, the abort of
its open transaction first (CONCURRENT_TRANSACTIONS, retried by the client), a new
producer id once the epoch is exhausted; INVALID_TRANSACTION_TIMEOUT above
`transaction.max.timeout.ms`; TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Write
on the TransactionalId. PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
clients before v4, as Kafka answers them. v6 (KIP-939, two-phase commit) is not served.
"""

from __future__ import annotations

from broker.dispatch import failure, handler_for
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.transactions import WRITE_TRANSACTIONAL_ID, transactional_id_permitted
from protocol.api_types import InitProducerIdRequest
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import INIT_PRODUCER_ID

__all__ = ["HANDLERS", "init_producer_id"]

# What Kafka answers beside an error: no id.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# The first version whose clients know PRODUCER_FENCED (KIP-588).
PRODUCER_FENCED_MIN_VERSION = 4


def _answer(error: KafkaError, producer_id: int, epoch: int) -> KafkaAnswer:
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


async def init_producer_id(call: KafkaCall) -> KafkaAnswer:
    tid = call.body["transactional_id"]
    producer_id = call.body.get("producer_id", NO_PRODUCER_ID)
    epoch = call.body.get("producer_epoch", NO_PRODUCER_EPOCH)
    if tid is not None:
        if not transactional_id_permitted(call, WRITE_TRANSACTIONAL_ID, tid):
            error = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return _answer(error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        answer = await call.ctx.transactions.init_producer_id(
            tid, call.body["transaction_timeout_ms"], producer_id, epoch
        )
        error = answer.error
        if error is KafkaError.PRODUCER_FENCED and call.version < PRODUCER_FENCED_MIN_VERSION:
            error = KafkaError.INVALID_PRODUCER_EPOCH
        return _answer(error, answer.producer_id, answer.producer_epoch)
    body: InitProducerIdRequest = {
        "transactional_id": None,
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
    }
    try:
        granted = await handler_for("init_producer_id")(call.ctx, body)
    except Exception as exc:
        refused = failure("init_producer_id", exc)
        return _answer(for_tidelog_code(refused.code), NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert isinstance(granted, dict)
    return _answer(KafkaError.NONE, granted["producer_id"], granted["producer_epoch"])


HANDLERS: dict[int, KafkaApi] = {
    INIT_PRODUCER_ID.key: KafkaApi(init_producer_id, via=("init_producer_id",), versions="0-5")
}
