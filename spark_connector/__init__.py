"""The PySpark Data Source (`format("tidelog")`) for batch and streaming reads and
writes.

It imports only `protocol` (executors need nothing else) and never `broker`,
`storage`, `retention` or `compaction`.
"""
