"""Kafka's default partitioner, so a key lands where a Kafka client would put it."""

from __future__ import annotations


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash, so a key maps to the partition Kafka would pick."""
    length = len(data)
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    h = (seed ^ length) & 0xFFFFFFFF
    whole = length - (length & 3)
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & 3
    if tail:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
