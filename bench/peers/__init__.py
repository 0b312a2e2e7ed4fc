"""Peer systems for `bench/compare.py`: NATS JetStream and Redis Streams, next to Tidelog.

Each harness installs its server when missing, starts it on loopback with a
temporary data directory, stops it by PID, and drives it with two clients: the
official Python one and the fastest raw one we could write (`*_proto`/`resp`
are their sans-I/O codecs). Every client implements `PeerClient`, so one set of
workloads (`workloads`) runs on all of them.
"""

from bench.peers._common import PeerClient, Spread, spread
from bench.peers.nats_peer import NatsPyClient, NatsServer, RawNatsClient
from bench.peers.redis_peer import RawRedisClient, RedisPyClient, RedisServer
from bench.peers.tidelog_peer import TidelogClient
from harness.process import ServerProcess
from harness.tidelog_server import TidelogServer

__all__ = [
    "NatsPyClient",
    "NatsServer",
    "PeerClient",
    "RawNatsClient",
    "RawRedisClient",
    "RedisPyClient",
    "RedisServer",
    "ServerProcess",
    "Spread",
    "TidelogClient",
    "TidelogServer",
    "spread",
]
