package dev.tidelog.interop;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients' round trip for the interop suite: produce keyed records with headers
 * (idempotent producer, the 4.x default), read them back through a consumer group, commit,
 * and print one JSON document (records, then the group's committed offsets) on stdout,
 * the shape interop/ecosystem/clients.py reads for every language.
 *
 * <p>Usage: ClientRoundTrip BOOTSTRAP TOPIC GROUP COUNT
 */
public final class ClientRoundTrip {
  private static final long DEADLINE_MS = 60_000;

  private ClientRoundTrip() {}

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    int count = Integer.parseInt(args[3]);
    produce(bootstrap, topic, count);
    System.out.println(consume(bootstrap, topic, group, count));
  }

  private static void produce(String bootstrap, String topic, int count) throws Exception {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
      for (int i = 0; i < count; i++) {
        ProducerRecord<String, String> record =
            new ProducerRecord<>(topic, "key-" + i, "value-" + i);
        record.headers().add("seq", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
        record.headers().add("client", "java".getBytes(StandardCharsets.UTF_8));
        producer.send(record).get();
      }
    }
  }

  private static String consume(String bootstrap, String topic, String group, int count) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    List<String> records = new ArrayList<>();
    Map<Integer, Long> committed = new TreeMap<>();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(List.of(topic));
      long deadline = System.currentTimeMillis() + DEADLINE_MS;
      while (records.size() < count && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
          records.add(recordJson(r));
        }
      }
      consumer.commitSync();
      for (Map.Entry<TopicPartition, OffsetAndMetadata> e :
          consumer.committed(consumer.assignment()).entrySet()) {
        if (e.getValue() != null) {
          committed.put(e.getKey().partition(), e.getValue().offset());
        }
      }
    }
    StringBuilder out = new StringBuilder("{\"records\":[");
    out.append(String.join(",", records)).append("],\"committed\":{");
    List<String> parts = new ArrayList<>();
    committed.forEach((p, o) -> parts.add("\"" + p + "\":" + o));
    return out.append(String.join(",", parts)).append("}}").toString();
  }

  private static String recordJson(ConsumerRecord<String, String> r) {
    List<String> headers = new ArrayList<>();
    for (Header h : r.headers()) {
      headers.add(
          "[" + quote(h.key()) + "," + quote(new String(h.value(), StandardCharsets.UTF_8)) + "]");
    }
    return "{\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
        + ",\"key\":" + quote(r.key()) + ",\"value\":" + quote(r.value())
        + ",\"headers\":[" + String.join(",", headers) + "]}";
  }

  /** The samples are printable ASCII: only quotes and backslashes need escaping. */
  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
