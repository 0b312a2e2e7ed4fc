"""Tidelog's wire and record contract, sans-I/O: framing, envelopes, request and
response schemas, the record-batch codec and the error registry, plus the clients
built on them.

The codec never touches a socket (like h11). This package imports nothing from the
rest of Tidelog: the broker, the storage engine and the Spark connector all build on it.
"""
