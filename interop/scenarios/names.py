"""The scenarios every client module offers (a client lists fewer or more in `SUPPORTED`)."""

SCENARIO_NAMES = ("produce_consume", "group_consume", "offsets", "admin_topics")
