"""The transaction coordinator (KIP-98, KIP-447; docs/transactions.md).

- `state`: Kafka's transaction states and one id's metadata;
- `records`: the `__transaction_state` key/value format;
- `coordinator`: the rules, pure;
- `state_log`: the compacted `__transaction_state` partition;
- `service`: the trio driver (locks, durable writes, markers, timers).
"""

from broker.transactions.config import TxnConfig
from broker.transactions.coordinator import Refuse, TxnCoordinator, Write
from broker.transactions.state import TxnMetadata, TxnState

__all__ = ["Refuse", "TxnConfig", "TxnCoordinator", "TxnMetadata", "TxnState", "Write"]
