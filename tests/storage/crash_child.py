"""The process the crash tests SIGKILL: appends, flushes, rolls, deletes and swaps segments.

Run as `python -m tests.storage.crash_child <data_dir> <mode>`, with failpoints set in
TIDELOG_FAILPOINTS. It prints `ack <offset> <value>` for every batch whose append
(and, in mode `acks-all`, fsync) returned, so the parent knows what was acknowledged.
Mode `open-only` just opens the data directory (to crash inside recovery).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import structlog

from protocol.batch import encode_batch
from storage.config import LogConfig
from storage.files import log_path
from storage.manager import LogManager

CONFIG = LogConfig(segment_bytes=1500, segment_index_bytes=64, index_interval_bytes=100)
APPENDS = 40


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    data_dir, mode = Path(sys.argv[1]), sys.argv[2]
    manager = LogManager(data_dir, CONFIG)
    manager.open()
    if mode == "open-only":
        os._exit(0)
    if "t" not in manager.topics():
        manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for i in range(APPENDS):
        value = f"value-{os.getpid()}-{i}".encode()
        count = 1 + i % 3
        info = log.append(encode_batch([(b"k", value, None, 1_700_000_000_000 + i)] * count))
        if mode == "acks-all":
            log.flush()
        print(f"ack {info.base_offset} {count} {value.decode()}", flush=True)
        if i % 7 == 6:
            manager.write_checkpoints()
        if i % 11 == 10:
            log.roll()
        if i % 13 == 12 and log.segment_count > 3:
            log.delete_oldest_segments(1, "crash-test")
        if i % 17 == 16 and log.segment_count > 2:
            # An identity "cleaning": the same bytes swapped in crash-safely.
            base = log.segments_info()[0].base_offset
            source = log_path(log.directory, base)
            (source.with_name(source.name + ".cleaned")).write_bytes(source.read_bytes())
            log.replace_segments([base], [base])
    os._exit(0)  # no clean shutdown: the parent checks unclean recovery too


if __name__ == "__main__":
    main()
