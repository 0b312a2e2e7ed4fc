"""The Kafka listener: Kafka's wire protocol as a second codec in front of broker/handlers/.

`protocol.kafka` turns bytes into `KafkaRequest`s and answers into bytes; this
package turns a Kafka request into calls on the same handlers the msgpack codec
uses (broker.dispatch) and their answers into Kafka response bodies. One module
per API family, each exporting `HANDLERS: dict[int, KafkaApi]` keyed by Kafka
API key (each row's adapter and what it needs from the authorizer);
`broker.kafka.registry` joins them behind its gate, and ApiVersions advertises
exactly the keys found there.
"""
