"""The log cleaner: choosing the filthiest log, the offset map, recopying segments
and the crash-safe swap of cleaned segments.

It imports `storage` and `protocol` only; the broker schedules it and runs the
cleaning in a worker thread.
"""
