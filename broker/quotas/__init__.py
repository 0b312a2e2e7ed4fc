"""Client quotas (Kafka's KIP-13/KIP-124/KIP-219): limits per user and client id,
stored in the data directory, measured over sampled windows, enforced by throttling.

`store` keeps the limits (what Describe/AlterClientQuotas read and write), `rate` is
Kafka's sampled rate, and `limits` joins them: which limit a connection's user and
client id fall under (Kafka's precedence) and how long it must wait when over it.
"""
