"""Kafka Streams 4.4 exactly_once_v2 on Apache Kafka and on Tidelog (issue 36's acceptance).

`WordCountApp` (interop/jvm_apps) splits lines into words, re-keys by word (a repartition
topic), counts in a state store (a changelog topic) and emits every new count. Three
stages on one broker and one application id:

1. the first lines, counted; the app is left running;
2. more lines, and the app is killed with SIGKILL while it works through them (its open
   transaction is left to be aborted), then started again on its state directory;
3. more lines, and the broker is killed with SIGKILL while the app works through them,
   then started again on the same data directory; the app rides it out.

After each stage the output, read with read_committed, must hold for every word exactly
the counts 1, 2, ..., n (n its true count so far): nothing counted twice, nothing lost.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from interop.ecosystem import kafka_io
from interop.ecosystem.brokers import RestartableBroker, restartable
from interop.ecosystem.streams import WORD_COUNT_MAIN, StreamsApp

pytestmark = pytest.mark.interop

WORDS = [f"w{i}" for i in range(12)]
STAGES = (40, 1500, 1500)  # lines produced per stage
# The later stages' lines arrive in chunks over a few seconds, so the app cannot have
# worked through a stage before the kill that is meant to land in its middle.
CHUNK_LINES, CHUNK_PAUSE_S = 50, 0.15
OUTPUT_TIMEOUT_S = 240.0


def _lines(first: int, count: int) -> list[str]:
    words = len(WORDS)
    return [
        " ".join(WORDS[(i * k) % words] for k in (1, 5, 7)) for i in range(first, first + count)
    ]


def _expected(lines: int) -> dict[str, list[int]]:
    counts = Counter(w for line in _lines(0, lines) for w in line.split(" "))
    return {w: list(range(1, n + 1)) for w, n in sorted(counts.items())}


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    kafka_io.produce(
        bootstrap,
        topic,
        [(i % 2, f"line-{i}".encode(), line.encode(), [], None)
         for i, line in enumerate(_lines(first, count), start=first)],
    )  # fmt: skip


@contextmanager
def _producing(bootstrap: str, topic: str, first: int, count: int) -> Iterator[threading.Event]:
    """Produce the lines chunk by chunk in the background; the event is set once every
    line is acknowledged. Leaving the block waits for the rest (and raises its error)."""
    done, errors = threading.Event(), list[BaseException]()

    def run() -> None:
        try:
            for start in range(first, first + count, CHUNK_LINES):
                _produce(bootstrap, topic, start, min(CHUNK_LINES, first + count - start))
                time.sleep(CHUNK_PAUSE_S)
        except BaseException as exc:  # surfaced in the test's thread below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, name="lines", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        thread.join(timeout=OUTPUT_TIMEOUT_S)
    if errors:
        raise errors[0]


def _committed_counts(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Every count per word a read_committed reader sees, in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": "wc-reader-unused",
            "enable.auto.commit": False, "isolation.level": "read_committed",
        }
    )  # fmt: skip
    try:
        tp = TopicPartition(topic, 0)
        end = consumer.get_watermark_offsets(tp, timeout=10)[1]  # the LSO, read_committed
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: dict[str, list[int]] = {}
        deadline = time.monotonic() + 60
        while consumer.position([tp])[0].offset < end and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            key, value = msg.key(), msg.value()
            assert isinstance(key, bytes) and isinstance(value, bytes)
            out.setdefault(key.decode(), []).append(int(value))
        return out
    finally:
        consumer.close()


def _wait_counts(
    app: StreamsApp, broker: RestartableBroker, topic: str, want: dict[str, list[int]], stage: str
) -> None:
    deadline = time.monotonic() + OUTPUT_TIMEOUT_S
    got: dict[str, list[int]] = {}
    while time.monotonic() < deadline:
        try:
            got = _committed_counts(broker.bootstrap, topic)
        except KafkaException:
            got = {}
        if {w: c[-1] for w, c in got.items()} == {w: c[-1] for w, c in want.items()}:
            break
        time.sleep(1)
    # The final counts are reached; exactly once: each count once, none skipped.
    assert got == want, (
        f"{stage}: read_committed output differs (word: counts seen):\n"
        + "\n".join(f"{w}: {got.get(w, [])[-5:]} len {len(got.get(w, []))} want {len(c)}"
                    for w, c in want.items() if got.get(w) != c)
        + f"\napp log:\n{app.log_tail()}\nbroker log:\n{broker.log_tail()}"
    )  # fmt: skip


def _wait_progress(broker: RestartableBroker, topic: str, beyond: int) -> None:
    """Block until the output's high watermark passes `beyond` (the app is mid-stage)."""

    def check() -> bool:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] > beyond
        finally:
            consumer.close()

    kafka_io.wait_for("the app's progress", check, OUTPUT_TIMEOUT_S, interval_s=0.2)


def _high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def _run(broker_name: str, work_dir: Path, unique: Callable[[str], str]) -> None:
    app_id = unique("wc-eos")
    src, out = unique("wc-lines"), unique("wc-counts")
    with restartable(broker_name, work_dir / "broker") as broker:
        kafka_io.create_topic(broker.bootstrap, src, 2)
        kafka_io.create_topic(broker.bootstrap, out, 1)
        app = StreamsApp(work_dir / "app", broker.bootstrap, app_id, src, out, main=WORD_COUNT_MAIN)
        try:
            lines = STAGES[0]
            _produce(broker.bootstrap, src, 0, lines)
            app.start()
            _wait_counts(app, broker, out, _expected(lines), "stage 1 (no failure)")

            before = _high_watermark(broker.bootstrap, out)
            with _producing(broker.bootstrap, src, lines, STAGES[1]) as all_sent:
                _wait_progress(broker, out, before + 50)
                app.kill()
                assert not all_sent.is_set(), "stage 2's lines were all sent before the kill"
            lines += STAGES[1]
            assert _committed_counts(broker.bootstrap, out) != _expected(lines), (
                "the app finished stage 2 before it was killed: not a mid-stream kill"
            )
            app.start()
            _wait_counts(app, broker, out, _expected(lines), "stage 2 (app killed -9)")

            before = _high_watermark(broker.bootstrap, out)
            with _producing(broker.bootstrap, src, lines, STAGES[2]) as all_sent:
                _wait_progress(broker, out, before + 50)
                mid_stream = not all_sent.is_set()
                broker.crash_restart()
            lines += STAGES[2]
            assert mid_stream, "stage 3's lines were all sent before the broker was killed"
            _wait_counts(app, broker, out, _expected(lines), "stage 3 (broker killed -9)")
        finally:
            app.kill()
        topics = kafka_io.topic_names(broker.bootstrap)
        assert {f"{app_id}-words-repartition", f"{app_id}-counts-changelog"} <= topics


@pytest.mark.timeout(900)
@pytest.mark.parametrize("broker_name", ["kafka", "tidelog"])
def test_exactly_once_v2_word_count_through_app_and_broker_kills(
    tmp_path: Path, unique: Callable[[str], str], broker_name: str
) -> None:
    _run(broker_name, tmp_path / broker_name, unique)
