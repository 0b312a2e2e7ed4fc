"""The transaction coordinator's read API (a Tidelog extension, docs/protocol.md §9).

- `list_transactions {transactional_ids = nil, states = []}` -> `{transactions:
  [{transactional_id, producer_id, producer_epoch, state, timeout_ms, start_ms,
  last_update_ms, partitions: [{topic, partition}]}]}`: every transactional id the
  coordinator knows (or the named ones; an unknown name is left out), in id order,
  filtered by Kafka's state names (Empty, Ongoing, PrepareCommit, PrepareAbort,
  CompleteCommit, CompleteAbort). `start_ms` is -1 when no transaction is open.

What `tidelog transactions list|describe` prints; Kafka clients use
ListTransactions/DescribeTransactions. Optional for other implementations: a
broker without transactions answers UNSUPPORTED_VERSION, as for any unknown API.
Registered with every other API in `protocol.schemas`.
"""

from __future__ import annotations

from protocol.schema_types import INT32, INT64, ApiSchema, ListOf, Nullable, Str, Struct, opt

LIST_TRANSACTIONS = "list_transactions"
# Transactional ids named in one request.
MAX_TRANSACTIONAL_IDS = 1000

LIST_TRANSACTIONS_SCHEMA = ApiSchema(
    LIST_TRANSACTIONS,
    Struct(
        transactional_ids=opt(Nullable(ListOf(Str(), max_items=MAX_TRANSACTIONAL_IDS)), None),
        states=opt(ListOf(Str(), max_items=16), []),
    ),
    Struct(
        transactions=ListOf(
            Struct(
                transactional_id=Str(),
                producer_id=INT64,
                producer_epoch=INT32,
                state=Str(),
                timeout_ms=INT32,
                start_ms=INT64,
                last_update_ms=INT64,
                partitions=ListOf(Struct(topic=Str(), partition=INT32)),
            )
        )
    ),
)

TRANSACTION_SCHEMAS: tuple[ApiSchema, ...] = (LIST_TRANSACTIONS_SCHEMA,)
