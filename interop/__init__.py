"""Interop harness for issue 19: Apache Kafka as oracle and peer, Kafka clients as probes.

A *target* is a bootstrap address plus a way to start it (`targets.open_target`); every
client scenario and Java tool here is a plain function of the bootstrap address, so a
second target (Tidelog's Kafka listener) is one more entry in `targets.TARGETS`.
"""
