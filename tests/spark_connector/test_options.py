"""Option parsing: Kafka's names, precedence and messages, plus our additions."""

from __future__ import annotations

import pytest

from spark_connector.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OptionError,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    SubscribePattern,
    check_known,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def batch(**extra: str) -> object:
    return parse_source_options({**BASE, **extra}, streaming=False)


def stream(**extra: str) -> object:
    return parse_source_options({**BASE, **extra}, streaming=True)


def test_defaults_match_kafka() -> None:
    opts = batch()
    assert opts.starting == Earliest() and opts.ending == Latest()
    assert opts.fail_on_data_loss is True and opts.include_headers is False
    assert stream().starting == Latest()


def test_keys_are_case_insensitive_and_kafka_prefix_is_an_alias() -> None:
    opts = parse_source_options(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": " a, ,b ", "StartingOffsets": "LATEST"},
        streaming=True,
    )
    assert opts.bootstrap_servers == "h:1"
    assert opts.subscription == Subscribe(("a", "b"))
    assert opts.starting == Latest()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bootstrap.servers": "h:1"}, "One of the following options must be specified"),
        ({**BASE, "assign": '{"t":[0]}'}, "Only one of the following options can be specified"),
        ({"bootstrap.servers": "h:1", "subscribe": " , "}, "No topics to subscribe to"),
        ({"bootstrap.servers": "h:1", "assign": "t:0"}, "No topicpartitions to assign"),
        ({"bootstrap.servers": "h:1", "subscribePattern": " "}, "Pattern to subscribe is empty"),
        ({"subscribe": "t"}, "'bootstrap.servers' (or 'kafka.bootstrap.servers') must be"),
        ({**BASE, "startingOffsets": "latest"}, "starting offset can't be latest for batch"),
        ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets for t-0 can't be latest"),
        ({**BASE, "endingOffsets": "earliest"}, "ending offset can't be earliest for batch"),
        ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, "ending offset for t-0 can't be earliest"),
        ({**BASE, "startingOffsets": "{bad"}, 'Expected e.g. {"topicA":{"0":23'),
        ({**BASE, "startingTimestamp": "soon"}, "Expected a single long value, got soon"),
        ({**BASE, "minPartitions": "0"}, "minPartitions must be positive"),
        ({**BASE, "maxRecordsPerPartition": "-3"}, "maxrecordsperpartition must be positive"),
        ({**BASE, "failOnDataLoss": "yes"}, 'must be "true" or "false"'),
        (
            {**BASE, "startingOffsets": '{"t":{"0":5}}', "endingOffsets": '{"t":{"0":3}}'},
            "The start offset 5 is greater than the end offset 3 for topic partition t-0",
        ),
        (
            {**BASE, "startingOffsets": '{"t":{"0":1}}', "endingOffsets": '{"u":{"0":3}}'},
            "different topic partitions",
        ),
        ({**BASE, "kafka.auto.offset.reset": "x"}, "Kafka option 'auto.offset.reset' is not"),
        ({**BASE, "kafka.key.deserializer": "x"}, "Kafka option 'key.deserializer' is not"),
        ({**BASE, "kafka.enable.auto.commit": "x"}, "Kafka option 'enable.auto.commit' is not"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "first"}, "must be 'error' or 'latest'"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_batch_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        parse_source_options(options, streaming=False)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"endingOffsets": "latest"}, "ending offset not valid in streaming queries"),
        ({"endingOffsetsByTimestamp": '{"t":{"0":1}}'}, "ending timestamp not valid"),
        (
            {"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            "The value of minOffsetPerTrigger(10) is higher than the maxOffsetsPerTrigger(5).",
        ),
        ({"maxTriggerDelay": "soon"}, "Option 'maxTriggerDelay' expects a duration"),
    ],
)
def test_stream_errors(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        stream(**extra)
    assert message in str(info.value)


def test_timestamp_precedence_global_over_per_partition_over_offsets() -> None:
    opts = batch(
        startingOffsets='{"t":{"0":3}}',
        startingOffsetsByTimestamp='{"t":{"0":100}}',
        startingTimestamp="200",
        startingOffsetsByTimestampStrategy="LATEST",
    )
    assert opts.starting == GlobalTimestamp(200, "latest")
    opts = batch(startingOffsets='{"t":{"0":3}}', startingOffsetsByTimestamp='{"t":{"0":100}}')
    assert opts.starting == SpecificTimestamps({("t", 0): 100}, "error")
    assert batch(startingOffsets='{"t":{"0":3,"1":-2}}').starting == SpecificOffsets(
        {("t", 0): 3, ("t", 1): -2}
    )


def test_subscriptions() -> None:
    opts = parse_source_options(
        {"bootstrap.servers": "h", "assign": '{"a":[1,0],"b":[2]}'}, streaming=False
    )
    assert opts.subscription == Assign((("a", 1), ("a", 0), ("b", 2)))
    opts = parse_source_options(
        {"bootstrap.servers": "h", "subscribePattern": "t.*"}, streaming=True
    )
    assert opts.subscription == SubscribePattern("t.*")


def test_unknown_option_suggests_the_closest_name() -> None:
    with pytest.raises(OptionError) as info:
        check_known({"startingoffset": "earliest"})
    assert "Unknown option 'startingoffset'" in str(info.value)
    assert "did you mean 'startingOffsets'?" in str(info.value)
    with pytest.raises(OptionError, match="did you mean 'maxOffsetsPerTrigger'"):
        batch(maxOffsetPerTrigger="5")


def test_trigger_options_are_ignored_with_a_warning_in_batch() -> None:
    opts = batch(maxOffsetsPerTrigger="5")
    assert opts.warnings == ("maxOffsetsPerTrigger option ignored in batch queries",)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("15m", 900_000), ("10s", 10_000), ("250", 250), ("2h", 7_200_000), ("500ms", 500)],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms("maxTriggerDelay", text) == ms


def test_sink_options() -> None:
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " out ", "acks": "1"})
    assert (opts.topic, opts.acks, opts.compression) == ("out", 1, "none")
    with pytest.raises(OptionError, match="acks=0 would break"):
        parse_sink_options({"bootstrap.servers": "h", "acks": "0"})
    with pytest.raises(OptionError, match=r"compression\.type"):
        parse_sink_options({"bootstrap.servers": "h", "compression.type": "brotli"})
    with pytest.raises(OptionError, match=r"'key\.serializer' is not supported"):
        parse_sink_options({"bootstrap.servers": "h", "kafka.key.serializer": "x"})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("fetch.max.bytes", str(2**31)),  # a fetch's max_bytes is an int32 on the wire
        ("kafkaConsumer.pollTimeoutMs", str(2**31)),  # sent as the fetch's max_wait_ms
        ("request.timeout.ms", str(2**40)),
    ],
)
def test_wire_bound_options_are_refused_above_their_field(option: str, value: str) -> None:
    with pytest.raises(OptionError, match=f"'{option}' must be <= 2147483647"):
        batch(**{option: value})
    assert batch(**{option: "2147483647"}) is not None


def test_sink_request_timeout_is_bounded_like_the_source() -> None:
    sink = {"bootstrap.servers": "h:1", "request.timeout.ms": str(2**31)}
    with pytest.raises(OptionError, match=r"request\.timeout\.ms"):
        parse_sink_options(sink)
