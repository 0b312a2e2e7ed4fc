"""What Apache Kafka 4.4 (single node, KRaft, interop/kafka_server.py) showed each client's
admin API in `interop.admin_scenarios` (recorded from a run; tests/interop checks Kafka still
answers so, tests/integration that Tidelog does)."""

from __future__ import annotations

from typing import Any

ADMIN_DETAILS: dict[str, dict[str, Any]] = {
    "kafka-python": {
        "bad_value": "INVALID_CONFIG",
        "broker_configs": {
            "log.retention.hours": (
                "168",
                "DEFAULT_CONFIG",
                True,
                [("log.retention.hours", "168", "DEFAULT_CONFIG")],
            ),
            "log.roll.hours": (
                "168",
                "DEFAULT_CONFIG",
                True,
                [("log.roll.hours", "168", "DEFAULT_CONFIG")],
            ),
        },
        "cluster": (1, True, True),
        "configs": {
            "cleanup.policy": (
                "delete",
                "DEFAULT_CONFIG",
                False,
                [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")],
            ),
            "retention.ms": (
                "3600000",
                "DYNAMIC_TOPIC_CONFIG",
                False,
                [("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG")],
            ),
            "segment.bytes": (
                "1073741824",
                "DEFAULT_CONFIG",
                False,
                [("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")],
            ),
            "segment.ms": ("604800000", "DEFAULT_CONFIG", False, []),
        },
        "configs_replaced": {
            "cleanup.policy": (
                "delete",
                "DEFAULT_CONFIG",
                False,
                [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")],
            ),
            "retention.ms": (
                "3600000",
                "DYNAMIC_TOPIC_CONFIG",
                False,
                [("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG")],
            ),
            "segment.bytes": (
                "1073741824",
                "DEFAULT_CONFIG",
                False,
                [("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")],
            ),
            "segment.ms": (
                "600000",
                "DYNAMIC_TOPIC_CONFIG",
                False,
                [("segment.ms", "600000", "DYNAMIC_TOPIC_CONFIG")],
            ),
        },
        "create": "NONE",
        "delete": [(False, 3), (True, 0)],
        "delete_records": [2, 2, "OFFSET_OUT_OF_RANGE"],
        "listed_after_validate": False,
        "replication_3": "INVALID_REPLICATION_FACTOR",
        "unknown_key": "INVALID_CONFIG",
        "validate_only": "NONE",
    },
    "aiokafka": {
        "alter": ["NONE"],
        "cluster": (1, 1),
        "configs": {
            "cleanup.policy": ("delete", "DEFAULT_CONFIG"),
            "retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
            "segment.bytes": ("1073741824", "DEFAULT_CONFIG"),
            "segment.ms": ("604800000", "DEFAULT_CONFIG"),
        },
        "configs_replaced": {
            "cleanup.policy": ("delete", "DEFAULT_CONFIG"),
            "retention.ms": ("604800000", "DEFAULT_CONFIG"),
            "segment.bytes": ("1073741824", "DEFAULT_CONFIG"),
            "segment.ms": ("600000", "DYNAMIC_TOPIC_CONFIG"),
        },
        "create": "NONE",
        "create_again": "TOPIC_ALREADY_EXISTS",
        "delete": ["NONE"],
        "delete_records": 3,
        "delete_records_beyond": "OFFSET_OUT_OF_RANGE",
        "replication_3": "INVALID_REPLICATION_FACTOR",
        "validate_only": "NONE",
    },
    "confluent-kafka": {
        "append": "NONE",
        "append_to_scalar": "INVALID_CONFIG",
        "bad_value": "INVALID_CONFIG",
        "broker_configs": {
            "log.retention.hours": (
                "168",
                "DEFAULT_CONFIG",
                True,
                [("log.retention.hours", "168", "DEFAULT_CONFIG")],
            ),
            "log.roll.hours": (
                "168",
                "DEFAULT_CONFIG",
                True,
                [("log.roll.hours", "168", "DEFAULT_CONFIG")],
            ),
        },
        "cluster": (1, True),
        "configs": {
            "cleanup.policy": (
                "compact",
                "DYNAMIC_TOPIC_CONFIG",
                False,
                [
                    ("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG"),
                    ("log.cleanup.policy", "delete", "DEFAULT_CONFIG"),
                ],
            ),
            "retention.ms": ("604800000", "DEFAULT_CONFIG", False, []),
            "segment.bytes": (
                "1073741824",
                "DEFAULT_CONFIG",
                False,
                [("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")],
            ),
            "segment.ms": ("604800000", "DEFAULT_CONFIG", False, []),
        },
        "configs_changed": {
            "cleanup.policy": (
                "delete",
                "DEFAULT_CONFIG",
                False,
                [("log.cleanup.policy", "delete", "DEFAULT_CONFIG")],
            ),
            "retention.ms": (
                "3600000",
                "DYNAMIC_TOPIC_CONFIG",
                False,
                [("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG")],
            ),
            "segment.bytes": (
                "1073741824",
                "DEFAULT_CONFIG",
                False,
                [("log.segment.bytes", "1073741824", "DEFAULT_CONFIG")],
            ),
            "segment.ms": ("604800000", "DEFAULT_CONFIG", False, []),
        },
        "create": "NONE",
        "delete": "NONE",
        "delete_missing": "UNKNOWN_TOPIC_OR_PART",
        "delete_records": [2, 5, "OFFSET_OUT_OF_RANGE"],
        "policy_after_append": "compact,delete",
        "policy_after_subtract": "delete",
        "replication_3": "INVALID_REPLICATION_FACTOR",
        "set_and_delete": "NONE",
        "subtract": "NONE",
        "validate_only": "NONE",
    },
}
