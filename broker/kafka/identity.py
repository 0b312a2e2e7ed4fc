"""Who this broker is to Kafka clients: node id, advertised address, cluster id.

Kafka names these `node.id`, `advertised.listeners` and the `cluster.id` of
`meta.properties`. Tidelog is one node, so it is also the controller. The keys
are read from the broker's explicit settings (`BrokerConfig.props`) when they
are there, so this works before and after the broker declares them; without
them the node is `DEFAULT_NODE_ID` at the `--listen` address.

The cluster id is created once, as Kafka's storage tool does (a random UUID in
URL-safe base64 without padding, 22 characters), and kept in the data
directory's `meta.properties`, so it survives restarts as clients expect.
"""

from __future__ import annotations

import base64
import os
import socket
import threading
import uuid
from pathlib import Path

from broker.config import BrokerConfig

# Kafka's node id of a single-node KRaft quickstart; what clients see without node.id.
DEFAULT_NODE_ID = 1
META_PROPERTIES = "meta.properties"
_CLUSTER_ID_KEY = "cluster.id"
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})

_lock = threading.Lock()  # one creation at a time


def node_id(config: BrokerConfig) -> int:
    """`node.id` when set, else DEFAULT_NODE_ID."""
    text = config.props.get("node.id")
    return int(text) if text is not None and text.strip() else DEFAULT_NODE_ID


def advertised_address(config: BrokerConfig, bound_port: int | None = None) -> tuple[str, int]:
    """(host, port) clients should connect to.

    The first entry of `advertised.listeners` (`NAME://host:port`) when set; else
    the `--listen` address, with a wildcard host replaced by this machine's name
    (as Kafka does) and port 0 by `bound_port` (the port actually bound).
    """
    text = config.props.get("advertised.listeners", "").strip()
    if text:
        first = text.split(",")[0].strip()
        hostport = first.split("://", 1)[-1]
        host, _, port = hostport.rpartition(":")
        return host.strip("[]"), int(port)
    host, port = config.listen
    if host in _WILDCARD_HOSTS:
        host = socket.getfqdn()
    if port == 0 and bound_port is not None:
        port = bound_port
    return host, port


def new_cluster_id() -> str:
    """A cluster id in Kafka's form: 16 random bytes, URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def cluster_id(data_dir: Path) -> str:
    """The data directory's cluster id, created and persisted on first use (blocking:
    call it in a worker thread)."""
    with _lock:
        return _read_cluster_id(data_dir) or _write_cluster_id(data_dir, new_cluster_id())


def _read_cluster_id(data_dir: Path) -> str | None:
    try:
        text = (data_dir / META_PROPERTIES).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == _CLUSTER_ID_KEY and value.strip():
            return value.strip()
    return None


def _write_cluster_id(data_dir: Path, value: str) -> str:
    """Write, fsync, rename: a crash leaves the old file or the whole new one."""
    path = data_dir / META_PROPERTIES
    tmp = path.with_name(META_PROPERTIES + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(f"version=1\n{_CLUSTER_ID_KEY}={value}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return value
