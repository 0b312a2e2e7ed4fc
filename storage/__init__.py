"""The storage engine: log manager, partition logs, segments, offset and time
indexes, checkpoints and crash recovery, all synchronous Python over files.

It imports only `protocol` (for the batch layout and error types). It must never
import trio, prometheus_client or `broker`: the broker decides what runs on the
event loop and what runs in a worker thread.
"""

from storage.checkpoint import read_checkpoint, write_checkpoint
from storage.config import LONG_MAX, TOPIC_CONFIG_DEFS, LogConfig
from storage.fileio import FileIO
from storage.files import CLEANER_OFFSET_CHECKPOINT
from storage.log import AppendInfo, FetchData, Log
from storage.manager import LogManager
from storage.segment import SegmentInfo

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "LONG_MAX",
    "TOPIC_CONFIG_DEFS",
    "AppendInfo",
    "FetchData",
    "FileIO",
    "Log",
    "LogConfig",
    "LogManager",
    "SegmentInfo",
    "read_checkpoint",
    "write_checkpoint",
]
