"""The raw Redis client's RESP2 codec: encoder, general decoder, pipeline line counter."""

from __future__ import annotations

import pytest

from bench.peers.resp import (
    LineCounter,
    ReplyDecoder,
    RespError,
    XrangeReader,
    encode_command,
    encode_xadd_pipeline,
    xadd_prefix,
)


def test_encode_command_is_an_array_of_bulk_strings() -> None:
    assert encode_command("XRANGE", b"s", "-", 10) == (
        b"*4\r\n$6\r\nXRANGE\r\n$1\r\ns\r\n$1\r\n-\r\n$2\r\n10\r\n"
    )


def test_xadd_pipeline_equals_one_encode_command_per_value() -> None:
    values = [b"abc", b"\r\n\x00", b"zzz"]
    prefix = xadd_prefix(b"stream", b"v", 3)
    expected = b"".join(encode_command("XADD", b"stream", "*", b"v", v) for v in values)
    assert encode_xadd_pipeline(prefix, values) == expected
    assert encode_xadd_pipeline(prefix, []) == b""


def test_xadd_pipeline_refuses_a_value_of_another_length() -> None:
    with pytest.raises(ValueError, match="3 bytes"):
        encode_xadd_pipeline(xadd_prefix(b"s", b"v", 3), [b"abc", b"abcd"])


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        pytest.param(b"+OK\r\n", "OK", id="simple-string"),
        pytest.param(b":-42\r\n", -42, id="integer"),
        pytest.param(b"$5\r\na\r\nbc\r\n", b"a\r\nbc", id="bulk-with-crlf-inside"),
        pytest.param(b"$-1\r\n", None, id="nil-bulk"),
        pytest.param(b"*-1\r\n", None, id="nil-array"),
        pytest.param(b"*0\r\n", [], id="empty-array"),
        pytest.param(
            b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nv\r\n$2\r\nab\r\n",
            [[b"1-0", [b"v", b"ab"]]],
            id="xrange-entry",
        ),
    ],
)
def test_decoder_reads_every_reply_type(wire: bytes, expected: object) -> None:
    decoder = ReplyDecoder()
    decoder.feed(wire)
    assert list(decoder.replies()) == [expected]


def test_decoder_waits_for_the_rest_of_a_split_reply() -> None:
    wire = b"*2\r\n$3\r\nabc\r\n:7\r\n+OK\r\n"
    decoder = ReplyDecoder()
    got: list[object] = []
    for i in range(len(wire)):  # one byte at a time: every split point
        decoder.feed(wire[i : i + 1])
        got.extend(decoder.replies())
    assert got == [[b"abc", 7], "OK"]


def test_error_reply_is_a_value_so_the_pipeline_keeps_its_other_answers() -> None:
    decoder = ReplyDecoder()
    decoder.feed(b"-WRONGTYPE bad key\r\n:1\r\n")
    first, second = decoder.replies()
    assert isinstance(first, RespError) and "WRONGTYPE" in str(first)
    assert second == 1


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"?what\r\n", id="unknown-type"),
        pytest.param(b"$3\r\nabcXY", id="bulk-without-crlf"),
    ],
)
def test_decoder_refuses_bytes_that_are_not_resp(wire: bytes) -> None:
    decoder = ReplyDecoder()
    decoder.feed(wire)
    with pytest.raises(RespError):
        list(decoder.replies())


def test_line_counter_counts_across_any_split() -> None:
    wire = b"$15\r\n1700000000000-0\r\n$15\r\n1700000000000-1\r\n"
    for cut in range(len(wire) + 1):
        counter = LineCounter()
        counter.feed(wire[:cut])
        assert counter.feed(wire[cut:]) == 4


@pytest.mark.parametrize("cut", [0, 1, 3, 6])
def test_line_counter_raises_an_error_reply_wherever_it_starts(cut: int) -> None:
    """The error is raised as soon as its `-` is seen; its text may be cut at the read."""
    wire = b"$3\r\n1-0\r\n-OOM out of memory\r\n"
    counter = LineCounter()
    with pytest.raises(RespError) as caught:
        counter.feed(wire[: 9 + cut])
        counter.feed(wire[9 + cut :])
    assert "OOM out of memory".startswith(str(caught.value))
    assert str(caught.value) == "OOM out of memory"[: max(0, cut - 1)] or cut == 0


def _xrange_reply(entries: list[tuple[bytes, bytes]]) -> bytes:
    out = [b"*%d\r\n" % len(entries)]
    for entry_id, value in entries:
        out.append(b"*2\r\n$%d\r\n%s\r\n*2\r\n$1\r\nv\r\n" % (len(entry_id), entry_id))
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    return b"".join(out)


def test_xrange_reader_returns_every_entry_across_any_split() -> None:
    entries = [(b"1700000000000-0", b"a\r\nb"), (b"1700000000000-1", b"*2\r\n"), (b"7-12", b"zzzz")]
    wire = _xrange_reply(entries)
    for cut in range(len(wire) + 1):
        reader = XrangeReader(b"v", 4)
        got = reader.feed(wire[:cut])
        got += reader.feed(wire[cut:])
        assert got == entries
        assert reader.done


def test_xrange_reader_empty_reply_and_errors() -> None:
    reader = XrangeReader(b"v", 4)
    assert reader.feed(b"*0\r\n") == [] and reader.done
    with pytest.raises(RespError, match="WRONGTYPE"):
        XrangeReader(b"v", 4).feed(b"-WRONGTYPE not a stream\r\n")
    wrong_size = _xrange_reply([(b"1-0", b"x" * 300)])
    with pytest.raises(RespError, match="expected field and size"):
        XrangeReader(b"v", 4).feed(wrong_size)
