"""The `tidelog` CLI without a broker: parsing, help, error lines, offline dump-log."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from broker.cli.common import CliError, format_time_ms, parse_key_value, parse_time_ms
from broker.cli.consume import start_offset
from broker.cli.main import build_parser, main
from protocol.batch import encode_batch, set_base_offset
from protocol.calls import OffsetAndTimestamp
from protocol.compression import Compression

COMMANDS = [
    ["serve"],
    ["topics"],
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "delete"],
    ["topics", "alter-config"],
    ["produce"],
    ["consume"],
    ["offsets"],
    ["delete-records"],
    ["log-dirs"],
    ["dump-log"],
    ["users", "add"],
    ["users", "list"],
    ["acls", "add"],
    ["acls", "list"],
    ["acls", "remove"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: tidelog " + " ".join(command))


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("serve", "topics", "produce", "consume", "offsets", "dump-log", "log-dirs"):
        assert name in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["consume"])  # TOPIC missing
    assert info.value.code == 2
    assert "TOPIC" in capsys.readouterr().err


def test_serve_flags_and_defaults() -> None:
    args = build_parser().parse_args(
        ["serve", "--data-dir", "d", "--set", "a=1", "--set", "b=2", "--config", "f"]
    )
    assert (args.data_dir, args.listen) == ("d", None)  # None: the first of `listeners`
    assert args.metrics_listen == "127.0.0.1:9644"
    assert (args.set, args.config, args.log_format) == (["a=1", "b=2"], "f", "auto")


def test_bootstrap_server_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_parser().parse_args(["topics", "list"]).bootstrap_server == "127.0.0.1:9092"
    monkeypatch.setenv("TIDELOG_BOOTSTRAP_SERVER", "10.0.0.1:1234")
    assert build_parser().parse_args(["topics", "list"]).bootstrap_server == "10.0.0.1:1234"


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return listener.getsockname()[1]


def test_unreachable_broker_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["topics", "list", "-b", f"127.0.0.1:{closed_port()}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: CONNECTION_ERROR: cannot talk to 127.0.0.1:")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_malformed_bootstrap_server_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "list", "-b", "host:notaport"]) == 1
    assert capsys.readouterr().err.startswith("error: BAD_INPUT: bad address 'host:notaport'")


def test_bad_offset_spec_fails_before_contacting_anyone() -> None:
    with pytest.raises(CliError) as info:
        start_offset("sometime", 0, 10, lambda ms: None)
    assert info.value.line() == (
        "error: BAD_INPUT: cannot read offset 'sometime' "
        "(use start, end, an offset, +N, -N or @TIME)"
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("start", 5),
        ("end", 50),
        ("7", 7),
        ("1", 5),  # below the log start: clamped
        ("70", 50),
        ("+3", 8),
        ("+100", 50),
        ("-3", 47),
        ("-100", 5),
        ("@1000", 20),
        ("@9999", 50),  # nothing at or after: the end
    ],
)
def test_start_offset_specs(spec: str, expected: int) -> None:
    def lookup(ms: int) -> OffsetAndTimestamp | None:
        return OffsetAndTimestamp(20, ms) if ms < 5000 else None

    assert start_offset(spec, 5, 50, lookup) == expected


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1714521600000", 1714521600000),
        ("2024-05-01T00:00:00Z", 1714521600000),
        ("2024-05-01T02:00:00+02:00", 1714521600000),
        ("2024-05-01", 1714521600000),
        ("2024-05-01T00:00:00.250", 1714521600250),
    ],
)
def test_parse_time_ms(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


def test_time_helpers_reject_and_format() -> None:
    with pytest.raises(CliError, match="cannot read"):
        parse_time_ms("2024-13-45")
    assert format_time_ms(1714521600250) == "2024-05-01T00:00:00.250+00:00"
    assert format_time_ms(-1) == "-"
    assert parse_key_value("a=b=c") == ("a", "b=c")
    with pytest.raises(CliError, match="KEY=VALUE"):
        parse_key_value("novalue")


def write_segment(directory: Path, *batches: bytes) -> Path:
    path = directory / "00000000000000000100.log"
    data = bytearray()
    offset = 100
    for batch in batches:
        start = len(data)
        data += batch
        set_base_offset(data, start, offset)
        offset += 2
    path.write_bytes(bytes(data))
    return path


def two_records(compression: Compression = Compression.NONE) -> bytes:
    return encode_batch(
        [(b"k", b"hello", [("h", b"1")], 1_000), (None, None, None, 2_000)], compression=compression
    )


def test_dump_log_prints_batches_and_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_segment(tmp_path, two_records(), two_records(Compression.ZSTD))
    assert main(["dump-log", "--print-data-log", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "Starting offset: 100"
    batch_lines = [line for line in lines if line.startswith("baseOffset")]
    assert len(batch_lines) == 2
    assert batch_lines[0].startswith("baseOffset: 100 lastOffset: 101 count: 2 position: 0")
    assert "compresscodec: zstd" in batch_lines[1] and "isValid: true" in batch_lines[1]
    records = [line for line in lines if line.startswith("| offset")]
    assert records[0] == (
        "| offset: 100 CreateTime: 1000 keySize: 1 valueSize: 5 headerKeys: [h] key: k "
        "payload: hello"
    )
    assert records[1].endswith("keySize: -1 valueSize: -1 headerKeys: [] key: null payload: null")
    assert lines[-1] == f"2 batches, {path.stat().st_size} bytes"


def test_dump_log_flags_a_bad_crc_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_segment(tmp_path, two_records(), two_records())
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's payload
    path.write_bytes(bytes(data))
    assert main(["dump-log", str(path)]) == 1
    captured = capsys.readouterr()
    batch_lines = [line for line in captured.out.splitlines() if line.startswith("baseOffset")]
    assert "isValid: false reason:" in batch_lines[0] and "CRC" in batch_lines[0]
    assert "isValid: true" in batch_lines[1]
    assert captured.err == (
        "error: CORRUPT_MESSAGE: 1 problem(s) found (see the PROBLEM lines above)\n"
    )


def test_dump_log_stops_at_a_torn_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = two_records()
    path = write_segment(tmp_path, batch, batch)
    path.write_bytes(path.read_bytes()[: len(batch) + 30])
    assert main(["dump-log", str(path)]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM" in out and "30 trailing bytes at position" in out


def test_dump_log_reads_indexes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_segment(tmp_path, two_records(), two_records())
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(bytes.fromhex("00000001 00000000 00000003 00000050") + bytes(16))
    timeindex = tmp_path / "00000000000000000100.timeindex"
    timeindex.write_bytes(bytes.fromhex("00000000000003e8 00000001") + bytes(12))
    assert main(["dump-log", str(index), str(timeindex)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "offset: 101 position: 0" in out and "offset: 103 position: 80" in out
    assert "timestamp: 1000 (1970-01-01T00:00:01.000+00:00) offset: 101" in out
    assert out.count("2 entries") == 1 and out.count("1 entries") == 1


def test_dump_log_flags_an_index_pointing_past_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_segment(tmp_path, two_records())
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(bytes.fromhex("00000005 00100000"))
    assert main(["dump-log", str(index)]) == 1
    assert "is past the log" in capsys.readouterr().out


def test_dump_log_refuses_other_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert main(["dump-log", str(other)]) == 1
    assert capsys.readouterr().err.startswith("error: BAD_INPUT: notes.txt is not a segment file")
    assert main(["dump-log", str(tmp_path / "missing.log")]) == 1
    assert capsys.readouterr().err.startswith("error: NOT_FOUND: cannot read")
