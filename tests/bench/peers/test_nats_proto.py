"""The raw NATS client's protocol codec: ops we send, server events we parse."""

from __future__ import annotations

import json

import pytest

from bench.peers.nats_proto import (
    Msg,
    NatsParser,
    NatsProtocolError,
    Ping,
    check_ack,
    connect_op,
    encode_pub_pipeline,
    msg_run_pattern,
    pub_op,
    pub_prefix,
    sub_op,
)


def test_client_ops() -> None:
    assert sub_op("_INBOX.x.*", 7) == b"SUB _INBOX.x.* 7\r\n"
    assert pub_op("s", b"hi") == b"PUB s 2\r\nhi\r\n"
    assert pub_op("s", b"hi", "r.1") == b"PUB s r.1 2\r\nhi\r\n"
    connect = connect_op(name="b")
    assert connect.startswith(b"CONNECT ") and connect.endswith(b"\r\n")
    fields = json.loads(connect[8:])
    assert fields["verbose"] is False and fields["headers"] is True and fields["name"] == "b"


def test_pub_pipeline_equals_one_pub_op_per_payload() -> None:
    payloads = [b"ab\r\n", b"\x00\x01\x02\x03"]
    assert encode_pub_pipeline(pub_prefix("s", "r.a", 4), payloads) == b"".join(
        pub_op("s", p, "r.a") for p in payloads
    )
    with pytest.raises(ValueError, match="4 bytes"):
        encode_pub_pipeline(pub_prefix("s", "r.a", 4), [b"abc"])


SERVER_BYTES = (
    b'INFO {"server_id":"x"}\r\n'
    b"MSG s 1 2\r\nhi\r\n"
    b"MSG s 1 reply.to 4\r\na\r\nb\r\n"
    b"PING\r\n"
    b"HMSG _INBOX.p 1 16 16\r\nNATS/1.0 408 x\r\n\r\n"
    b"HMSG s 2 r 12 14\r\nNATS/1.0\r\n\r\nok\r\n"
    b"PONG\r\n"
)
EXPECTED = [
    "INFO",
    Msg(b"s", b"1", None, None, b"hi"),
    Msg(b"s", b"1", b"reply.to", None, b"a\r\nb"),
    Ping(),
    Msg(b"_INBOX.p", b"1", None, b"NATS/1.0 408 x\r\n", b""),
    Msg(b"s", b"2", b"r", b"NATS/1.0\r\n\r\n", b"ok"),
    "PONG",
]


def test_parser_reads_every_server_op() -> None:
    parser = NatsParser()
    parser.feed(SERVER_BYTES)
    events = list(parser.events())
    assert events == EXPECTED
    assert events[4].status == 408
    assert events[5].status is None and events[1].status is None


def test_parser_handles_every_split_point() -> None:
    parser = NatsParser()
    got: list[object] = []
    for i in range(len(SERVER_BYTES)):
        parser.feed(SERVER_BYTES[i : i + 1])
        got.extend(parser.events())
    assert got == EXPECTED


def test_parser_raises_err_and_garbage() -> None:
    parser = NatsParser()
    parser.feed(b"-ERR 'Authorization Violation'\r\n")
    with pytest.raises(NatsProtocolError, match="Authorization Violation"):
        list(parser.events())
    parser = NatsParser()
    parser.feed(b"HELLO\r\n")
    with pytest.raises(NatsProtocolError, match="unknown server op"):
        list(parser.events())
    parser = NatsParser()
    parser.feed(b"M" * 5000)
    with pytest.raises(NatsProtocolError, match="too long"):
        list(parser.events())


def test_check_ack() -> None:
    assert check_ack(b'{"stream":"s","seq":41}') == 41
    with pytest.raises(NatsProtocolError, match="no stream"):
        check_ack(b'{"error":{"code":503,"description":"no stream"}}')


def test_take_ack_run_counts_whole_acks_and_leaves_the_rest() -> None:
    ack = b'MSG _INBOX.x.a 1 24\r\n{"stream":"s","seq":12}\r\n'
    parser = NatsParser()
    parser.feed(ack * 3 + b"PING\r\n" + ack + ack[:10])
    assert parser.take_ack_run() == (3, False)
    assert parser.take_ack_run() == (0, False)  # a PING is next: the general parser's job
    assert next(parser.events()) == Ping()
    assert parser.take_ack_run() == (1, False)
    assert list(parser.events()) == []  # the cut ack waits for its rest
    parser.feed(ack[10:])
    assert parser.take_ack_run() == (1, False)


def test_take_ack_run_flags_an_error_ack() -> None:
    parser = NatsParser()
    error = b'{"error":{"code":503}}'
    parser.feed(b"MSG r 1 %d\r\n%s\r\n" % (len(error), error))
    assert parser.take_ack_run() == (1, True)


def test_take_msg_run_returns_the_payloads_of_a_run_of_one_size() -> None:
    def msg(payload: bytes) -> bytes:
        return b"MSG s 2 $JS.ACK.s.c.1.%d.1 %d\r\n%s\r\n" % (len(payload), len(payload), payload)

    pattern = msg_run_pattern(4)
    parser = NatsParser()
    parser.feed(msg(b"a\r\nb") + msg(b"cccc") + msg(b"dd") + msg(b"eeee")[:9])
    assert parser.take_msg_run(pattern) == [b"a\r\nb", b"cccc"]
    assert parser.take_msg_run(pattern) == []  # another size: left to events()
    assert list(parser.events()) == [Msg(b"s", b"2", b"$JS.ACK.s.c.1.2.1", None, b"dd")]
    assert parser.take_msg_run(pattern) == []  # cut by the read
    parser.feed(msg(b"eeee")[9:])
    assert parser.take_msg_run(pattern) == [b"eeee"]
