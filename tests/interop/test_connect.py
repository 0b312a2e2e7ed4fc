"""Kafka Connect 4.3.1 in distributed mode on Tidelog, with Apache Kafka as the oracle
(issue 37): the worker's config, offset and status topics live on the broker under test,
a FileStream source feeds a topic and a FileStream sink writes it back out, and neither a
worker restart nor a broker restart loses or duplicates a committed line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from interop.ecosystem import kafka_io
from interop.ecosystem.brokers import restartable
from interop.ecosystem.connect import FILE_SINK, FILE_SOURCE, ConnectWorker

pytestmark = pytest.mark.interop

LINES_PER_STEP = 20
# Lines must reach the sink file within this long of being appended to the source file.
FLOW_TIMEOUT_S = 90.0


def _append(path: Path, first: int, count: int) -> None:
    with path.open("a") as out:
        out.writelines(f"line-{i}\n" for i in range(first, first + count))


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_lines(path: Path, count: int, worker: ConnectWorker) -> None:
    def arrived() -> bool:
        return len(_lines(path)) >= count

    try:
        kafka_io.wait_for(f"{count} lines in {path.name}", arrived, FLOW_TIMEOUT_S)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; worker log:\n{worker.log_tail()}") from None


def _file_pipeline(broker_name: str, work_dir: Path, unique: Callable[[str], str]) -> list[str]:
    """Source file -> topic -> sink file across a worker and a broker restart; the topic's
    values (what the checks compare) once every line is out."""
    topic = unique("connect-lines")
    source_file, sink_file = work_dir / "input.txt", work_dir / "output.txt"
    source_file.touch()
    with restartable(broker_name, work_dir / "broker") as broker:
        kafka_io.create_topic(broker.bootstrap, topic, 1)
        with ConnectWorker(work_dir / "worker", broker.bootstrap, unique("connect")) as worker:
            worker.put_connector(
                "lines-in",
                {"connector.class": FILE_SOURCE, "tasks.max": "1",
                 "file": str(source_file), "topic": topic},
            )  # fmt: skip
            worker.put_connector(
                "lines-out",
                {"connector.class": FILE_SINK, "tasks.max": "1",
                 "file": str(sink_file), "topics": topic},
            )  # fmt: skip
            kafka_io.wait_for(
                "both connectors RUNNING",
                lambda: worker.running("lines-in") and worker.running("lines-out"),
                60,
            )
            _append(source_file, 0, LINES_PER_STEP)
            _wait_lines(sink_file, LINES_PER_STEP, worker)

            worker.restart()
            _append(source_file, LINES_PER_STEP, LINES_PER_STEP)
            _wait_lines(sink_file, 2 * LINES_PER_STEP, worker)

            broker.restart()
            _append(source_file, 2 * LINES_PER_STEP, LINES_PER_STEP)
            _wait_lines(sink_file, 3 * LINES_PER_STEP, worker)

            # A restarted sink re-delivers from its group's committed offset: once that is
            # at the end again, any duplicate would be in the file.
            worker.restart()
            total = 3 * LINES_PER_STEP
            kafka_io.wait_for(
                "the sink's group committed at the end",
                lambda: (
                    kafka_io.committed(broker.bootstrap, topic, "connect-lines-out") == {0: total}
                ),
                FLOW_TIMEOUT_S,
            )
            internal = set(worker.topics.values())
            assert internal <= kafka_io.topic_names(broker.bootstrap)
            assert _lines(sink_file) == [f"line-{i}" for i in range(3 * LINES_PER_STEP)]
            values = [r.value for r in kafka_io.read_all(broker.bootstrap, topic)]
            return [v.decode() if v is not None else "<null>" for v in values]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("broker_name", ["kafka", "tidelog"])
def test_filestream_across_worker_and_broker_restarts(
    tmp_path: Path, unique: Callable[[str], str], broker_name: str
) -> None:
    values = _file_pipeline(broker_name, tmp_path, unique)
    assert values == [f"line-{i}" for i in range(3 * LINES_PER_STEP)]
