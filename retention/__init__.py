"""Retention: which segments of a partition may be deleted and why, as small pure
functions of segment metadata and config, plus the pass that applies them.

It imports `storage` and `protocol` only; scheduling belongs to `broker`.
"""
