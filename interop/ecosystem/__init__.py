"""The JVM frameworks and other-language clients people point at a Kafka broker (issue 37):
Kafka Connect, MirrorMaker 2, Kafka Streams, kafkajs, franz-go, sarama, kafka-clients.

Each is built or fetched from the project's own files under `interop/` (Maven poms, a
package.json with its lockfile, a go.mod with its go.sum) into `~/.cache/tidelog`, never
into the repository; `toolchains.py` does that, the other modules drive one tool each.
"""
