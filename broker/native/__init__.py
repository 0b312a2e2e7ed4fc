"""Tidelog's msgpack protocol in the broker: the wire codec (`codec`) and the request
layer under it (`requests`), beside Kafka's in broker/kafka/."""
