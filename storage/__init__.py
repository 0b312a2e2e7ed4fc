"""The storage engine: log manager, partition logs, segments, offset and time
indexes, checkpoints and crash recovery, all synchronous Python over files.

It imports only `protocol` (for the batch layout and error types). It must never
import trio, prometheus_client or `broker`: the broker decides what runs on the
event loop and what runs in a worker thread.
"""
