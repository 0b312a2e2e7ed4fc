"""Kafka's InitProducerId (API 22, v0-5) on Tidelog's init_producer_id handler.

Every answer is a fresh id at epoch 0, as Kafka's coordinator gives an idempotent
producer: v3+'s previous producer id and epoch matter only with a transactional id
(Kafka, too, gives a producer without one a new id). A transactional id is refused
with INVALID_REQUEST (transactions are not served; the native handler's message says
so), and `transaction_timeout_ms` is ignored for the same reason. v2+ are flexible;
v4-5 only allow the newer errors (PRODUCER_FENCED, TRANSACTION_ABORTABLE), which an
idempotent producer never gets. v6 (two-phase commit, KIP-939) is not served.
"""

from __future__ import annotations

from broker.dispatch import failure, handler_for
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from protocol.api_types import InitProducerIdRequest
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import INIT_PRODUCER_ID

__all__ = ["HANDLERS", "init_producer_id"]

# What Kafka answers beside an error: no id.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def init_producer_id(call: KafkaCall) -> KafkaAnswer:
    body: InitProducerIdRequest = {
        "transactional_id": call.body["transactional_id"],
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
    }
    try:
        answer = await handler_for("init_producer_id")(call.ctx, body)
    except Exception as exc:
        error = failure("init_producer_id", exc)
        return {
            "throttle_time_ms": 0,
            "error_code": for_tidelog_code(error.code).code,
            "producer_id": NO_PRODUCER_ID,
            "producer_epoch": NO_PRODUCER_EPOCH,
        }
    assert isinstance(answer, dict)
    return {
        "throttle_time_ms": 0,
        "error_code": KafkaError.NONE.code,
        "producer_id": answer["producer_id"],
        "producer_epoch": answer["producer_epoch"],
    }


HANDLERS: dict[int, KafkaApi] = {
    INIT_PRODUCER_ID.key: KafkaApi(init_producer_id, via=("init_producer_id",), versions="0-5")
}
