"""An in-memory broker speaking the wire contract, for testing the codec and clients.

It uses the real server-side codec (FrameDecoder, parse_request,
validate_request, validate_batch) and keeps each partition as a list of
stored batches, so the clients are exercised against real bytes without a
broker process. `ServerConnection` is the sans-I/O server half of the
in-memory pair; `serve_in_thread` puts it behind a loopback socket for the
blocking client.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from protocol.batch import iter_headers, set_base_offset, validate_batch
from protocol.envelope import error_response, ok_response, parse_request, request_id_of
from protocol.errors import (
    InvalidPartitions,
    OffsetOutOfRange,
    TidelogError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.framing import FrameDecoder, FrameError, encode_frame
from protocol.schemas import API_VERSIONS, check_topic_name, validate_request


@dataclass
class FakePartition:
    batches: list[bytes] = field(default_factory=list)  # stored, offsets assigned
    log_start_offset: int = 0
    high_watermark: int = 0

    def append(self, records: bytes) -> int:
        buf = bytearray(records)
        positions = [pos for pos, _ in iter_headers(buf)]
        for pos in positions:
            validate_batch(buf, pos, producer=True)
        base = self.high_watermark
        for pos, header in iter_headers(buf):
            set_base_offset(buf, pos, self.high_watermark)
            self.batches.append(bytes(buf[pos : pos + header.size]))
            self.high_watermark += header.record_count
        return base

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} not in {self.log_start_offset}..")
        out = bytearray()
        for batch in self.batches:
            [(_, header)] = list(iter_headers(batch))
            if header.next_offset <= offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return bytes(out)


class FakeBroker:
    """Topic state plus one handler per API; `handle(obj)` answers one decoded frame."""

    def __init__(self) -> None:
        self.topics: dict[str, list[FakePartition]] = {}
        self.configs: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []  # every decoded request, for assertions
        self.producer_ids = 0  # init_producer_id hands out 0, 1, 2, ... (epoch 0)

    def handle(self, obj: object) -> dict[str, Any] | None:
        """The response map for one request map (None for acks=0 produce)."""
        try:
            request = parse_request(obj)
            body = validate_request(request)
        except TidelogError as exc:
            return error_response(request_id_of(obj), exc).to_wire()
        self.requests.append({"api": request.api, "client": request.client, "body": body})
        if request.api == "produce" and body["acks"] == 0:
            self._produce(body)
            return None
        try:
            answer = getattr(self, "_" + request.api)(body)
        except TidelogError as exc:
            return error_response(request.id, exc).to_wire()
        return ok_response(request.id, answer).to_wire()

    def _partition(self, topic: str, partition: int) -> FakePartition:
        partitions = self.topics.get(topic)
        if partitions is None or not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartition(f"{topic}-{partition}")
        return partitions[partition]

    def _per_partition(self, body: dict[str, Any], fn: Any) -> dict[str, Any]:
        topics = []
        for t in body["topics"]:
            answers = []
            for p in t["partitions"]:
                entry = {"partition": p["partition"], "error": None}
                try:
                    entry |= fn(t["topic"], p)
                except TidelogError as exc:
                    entry |= {"error": exc.code, "message": exc.message}
                answers.append(entry)
            topics.append({"topic": t["topic"], "partitions": answers})
        return {"topics": topics}

    def _api_versions(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "server": "fake",
            "version": "0",
            "apis": {name: list(v) for name, v in API_VERSIONS.items()},
            "limits": {"socket.request.max.bytes": 104857600, "message.max.bytes": 1048588},
        }

    def _init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        """Fresh ids only; the fake stores batches without deduplicating them."""
        self.producer_ids += 1
        return {"producer_id": self.producer_ids - 1, "producer_epoch": 0}

    def _create_topic(self, body: dict[str, Any]) -> dict[str, Any]:
        check_topic_name(body["topic"])
        if body["topic"] in self.topics:
            raise TopicAlreadyExists(body["topic"])
        if body["partitions"] < 1:
            raise InvalidPartitions(str(body["partitions"]))
        self.topics[body["topic"]] = [FakePartition() for _ in range(body["partitions"])]
        self.configs[body["topic"]] = dict(body["configs"])
        return {}

    def _delete_topic(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.topics.pop(body["topic"], None) is None:
            raise UnknownTopicOrPartition(body["topic"])
        return {}

    def _metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        names = body["topics"] if body["topics"] is not None else sorted(self.topics)
        out = []
        for name in names:
            parts = self.topics.get(name)
            if parts is None:
                out.append({"topic": name, "error": UnknownTopicOrPartition.code, "partitions": []})
                continue
            out.append(
                {
                    "topic": name,
                    "error": None,
                    "configs": self.configs[name],
                    "partitions": [
                        {
                            "partition": i,
                            "log_start_offset": p.log_start_offset,
                            "high_watermark": p.high_watermark,
                            "log_end_offset": p.high_watermark,
                            "size_bytes": sum(map(len, p.batches)),
                            "segments": 1,
                        }
                        for i, p in enumerate(parts)
                    ],
                }
            )
        return {"topics": out}

    def _describe_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["topic"] not in self.topics:
            raise UnknownTopicOrPartition(body["topic"])
        configs = {"retention.ms": {"value": "604800000", "source": "default"}}
        for key, value in self.configs[body["topic"]].items():
            configs[key] = {"value": str(value), "source": "topic"}
        return {"configs": configs}

    def _alter_configs(self, body: dict[str, Any]) -> dict[str, Any]:
        if body["topic"] not in self.topics:
            raise UnknownTopicOrPartition(body["topic"])
        configs = self.configs[body["topic"]]
        configs.update(body["set"])
        for key in body["delete"]:
            configs.pop(key, None)
        return {}

    def _produce(self, body: dict[str, Any]) -> dict[str, Any]:
        def produce(topic: str, p: dict[str, Any]) -> dict[str, Any]:
            partition = self._partition(topic, p["partition"])
            base = partition.append(p["records"])
            return {
                "base_offset": base,
                "log_append_time": -1,
                "log_start_offset": partition.log_start_offset,
            }

        return self._per_partition(body, produce)

    def _fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        def fetch(topic: str, p: dict[str, Any]) -> dict[str, Any]:
            partition = self._partition(topic, p["partition"])
            return {
                "high_watermark": partition.high_watermark,
                "log_start_offset": partition.log_start_offset,
                "records": partition.read(p["offset"], p["max_bytes"]),
            }

        return self._per_partition(body, fetch)

    def _list_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        def list_offsets(topic: str, p: dict[str, Any]) -> dict[str, Any]:
            partition = self._partition(topic, p["partition"])
            if p["spec"] == "earliest":
                return {"offset": partition.log_start_offset, "timestamp": -1}
            if p["spec"] == "latest":
                return {"offset": partition.high_watermark, "timestamp": -1}
            best = (-1, -1)
            for batch in partition.batches:
                [(_, header)] = list(iter_headers(batch))
                if header.max_timestamp > best[1]:
                    best = (header.last_offset, header.max_timestamp)
            return {"offset": best[0], "timestamp": best[1]}

        return self._per_partition(body, list_offsets)

    def _offset_for_time(self, body: dict[str, Any]) -> dict[str, Any]:
        def offset_for_time(topic: str, p: dict[str, Any]) -> dict[str, Any]:
            from protocol.batch import decode_records

            partition = self._partition(topic, p["partition"])
            for batch in partition.batches:
                for record in decode_records(batch):
                    if record.timestamp >= p["timestamp"]:
                        return {"offset": record.offset, "timestamp": record.timestamp}
            return {"offset": None, "timestamp": None}

        return self._per_partition(body, offset_for_time)

    def _delete_records(self, body: dict[str, Any]) -> dict[str, Any]:
        def delete_records(topic: str, p: dict[str, Any]) -> dict[str, Any]:
            partition = self._partition(topic, p["partition"])
            offset = partition.high_watermark if p["offset"] == -1 else p["offset"]
            if not partition.log_start_offset <= offset <= partition.high_watermark:
                raise OffsetOutOfRange(str(offset))
            partition.log_start_offset = offset
            return {"low_watermark": offset}

        return self._per_partition(body, delete_records)


class ServerConnection:
    """The sans-I/O server half: bytes in, response bytes out, `closed` after a bad frame."""

    def __init__(self, broker: FakeBroker, max_frame_bytes: int = 1 << 20) -> None:
        self.broker = broker
        self.decoder = FrameDecoder(max_frame_bytes)
        self.closed = False

    def receive_data(self, data: bytes) -> bytes:
        """Everything to send back for `data`; after a frame error, sets `closed`."""
        out = bytearray()
        try:
            self.decoder.feed(data)
            for obj in self.decoder:
                response = self.broker.handle(obj)
                if response is not None:
                    out += encode_frame(response)
        except FrameError as exc:  # docs/protocol.md §1: answer INVALID_REQUEST, then close
            out += encode_frame(error_response(-1, exc).to_wire())
            self.closed = True
        return bytes(out)


@contextlib.contextmanager
def serve_in_thread(broker: FakeBroker) -> Iterator[str]:
    """Serve `broker` on a loopback port (one thread per connection); yields `host:port`."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    threads: list[threading.Thread] = []
    conns: list[socket.socket] = []
    lock = threading.Lock()

    def serve_one(conn: socket.socket) -> None:
        server = ServerConnection(broker, max_frame_bytes=64 << 20)
        with conn:
            while not stop.is_set():
                try:
                    data = conn.recv(1 << 20)
                except OSError:
                    return
                if not data:
                    return
                with lock:
                    out = server.receive_data(data)
                if out:
                    try:
                        conn.sendall(out)
                    except OSError:  # the client closed first (a late answer): as a broker
                        return
                if server.closed:
                    return

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conns.append(conn)
            thread = threading.Thread(target=serve_one, args=(conn,), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept_loop, daemon=True)
    acceptor.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        listener.close()
        acceptor.join(5)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(5)
