"""The record batches confluent-kafka (librdkafka) writes, caught by a minimal listener.

librdkafka builds its batches in C and only sends them to a broker, so a test that
wants them as input runs this loopback listener: it answers ApiVersions (advertising
what librdkafka needs for v2 batches and every codec: Produce 3+, Fetch 4+,
FindCoordinator), Metadata (one partition, led by itself) and Produce (success),
and keeps every batch produced. Nothing is stored or validated here.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

import confluent_kafka

from protocol.kafka.codec import KafkaRequest, decode_request, encode_response
from protocol.kafka.messages import API_VERSIONS, FETCH, FIND_COORDINATOR, METADATA, PRODUCE

ADVERTISED = [(API_VERSIONS, 0, 3), (METADATA, 0, 4), (PRODUCE, 3, 7), (FETCH, 4, 11)]
ADVERTISED.append((FIND_COORDINATOR, 0, 2))  # librdkafka's sign of lz4 support (KIP-57)


def _read_exact(conn: socket.socket, size: int) -> bytes:
    buf = b""
    while len(buf) < size:
        chunk = conn.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _api_versions() -> dict[str, Any]:
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": api.key, "min_version": low, "max_version": high}
            for api, low, high in ADVERTISED
        ],
        "throttle_time_ms": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    }


def _metadata(port: int, topic: str) -> dict[str, Any]:
    partition = {
        "error_code": 0,
        "partition_index": 0,
        "leader_id": 0,
        "replica_nodes": [0],
        "isr_nodes": [0],
    }
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": port, "rack": None}],
        "cluster_id": "capture",
        "controller_id": 0,
        "topics": [
            {"error_code": 0, "name": topic, "is_internal": False, "partitions": [partition]}
        ],
    }


def _produced(request: KafkaRequest) -> dict[str, Any]:
    ok = {"error_code": 0, "base_offset": 0, "log_append_time_ms": -1, "log_start_offset": 0}
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [{"index": p["index"], **ok} for p in t["partition_data"]],
            }
            for t in request.body["topic_data"]
        ],
        "throttle_time_ms": 0,
    }


class _Listener:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.batches: list[bytes] = []
        self._stop = threading.Event()
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.port = self._socket.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while not self._stop.is_set():
                    (size,) = struct.unpack(">i", _read_exact(conn, 4))
                    conn.sendall(self._answer(decode_request(_read_exact(conn, size))))
            except OSError:  # ConnectionError included: the producer went away
                pass

    def _answer(self, request: KafkaRequest) -> bytes:
        key = request.api.key
        if key == API_VERSIONS.key:
            body = _api_versions()
        elif key == METADATA.key:
            body = _metadata(self.port, self.topic)
        else:
            assert key == PRODUCE.key, request.api.name
            for t in request.body["topic_data"]:
                self.batches.extend(bytes(p["records"]) for p in t["partition_data"])
            body = _produced(request)
        return encode_response(request.api, request.version, request.header.correlation_id, body)

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join()
        self._socket.close()


def librdkafka_batches(
    codec: str, rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]
) -> list[bytes]:
    """The batches confluent-kafka sends for `rows` (key, value, headers, timestamp)."""
    listener = _Listener("captured")
    try:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{listener.port}",
                "compression.type": codec,
                "linger.ms": 20,
                "acks": 1,
                "enable.idempotence": False,
                "log_level": 3,
            }
        )
        for key, value, headers, ts in rows:
            producer.produce(
                listener.topic, value=value, key=key, headers=headers, timestamp=ts, partition=0
            )
        assert producer.flush(15) == 0, "records not delivered"
    finally:
        listener.close()
    return listener.batches
