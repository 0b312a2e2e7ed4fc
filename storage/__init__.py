"""The storage engine: log manager, partition logs, segments, offset and time
indexes, checkpoints and crash recovery, all synchronous Python over files.

It imports only `protocol` (for the batch layout and error types). It must never
import trio, prometheus_client or `broker`: the broker decides what runs on the
event loop and what runs in a worker thread.
"""

from storage.config import TOPIC_CONFIG_DEFS, LogConfig
from storage.log import AppendInfo, FetchData, Log
from storage.manager import LogManager
from storage.segment import SegmentInfo

__all__ = [
    "TOPIC_CONFIG_DEFS",
    "AppendInfo",
    "FetchData",
    "Log",
    "LogConfig",
    "LogManager",
    "SegmentInfo",
]
