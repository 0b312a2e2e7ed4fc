package dev.tidelog.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients' transactional producer for the interop suite (issue 36), two modes.
 *
 * <p>{@code TxnApp scenario BOOTSTRAP TOPIC TXN_PREFIX}: two transactional producers A and B
 * interleave committed and aborted transactions over partitions 0 and 1 of TOPIC (every send
 * waited for, so the log's order is fixed); then A opens a transaction and the app prints
 * {@code OPEN} and waits for a line on stdin (the suite fetches the partitions raw meanwhile);
 * then a second producer with A's transactional.id fences A (A's next send and commit fail);
 * (its send, commit and then abort all fail); the new instance commits one more transaction. Last it prints one JSON document: every send's
 * offset, ListOffsets under both isolation levels while A's transaction was open and at the end,
 * what a read_committed and a read_uncommitted consumer read, and the exceptions A saw.
 *
 * <p>{@code TxnApp hang BOOTSTRAP TOPIC TXN_ID}: begin a transaction, send one record to each
 * of partitions 0 and 1, print {@code SENT} and sleep until killed (a hanging transaction for
 * kafka-transactions.sh; its transaction.timeout.ms is 15 minutes, the broker default maximum).
 */
public final class TxnApp {
  private static final Duration READ_DEADLINE = Duration.ofSeconds(60);

  private final String bootstrap;
  private final String topic;
  private final List<String> sends = new ArrayList<>();
  /** Each partition's high watermark once every marker asked for so far is written. */
  private final Map<Integer, Long> expectedEnd = new TreeMap<>();
  /** The partitions each producer's open transaction has touched. */
  private final Map<KafkaProducer<String, String>, java.util.Set<Integer>> touched =
      new HashMap<>();

  private TxnApp(String bootstrap, String topic) {
    this.bootstrap = bootstrap;
    this.topic = topic;
  }

  public static void main(String[] args) throws Exception {
    TxnApp app = new TxnApp(args[1], args[2]);
    if (args[0].equals("hang")) {
      app.hang(args[3]);
    } else {
      System.out.println(app.scenario(args[3]));
    }
  }

  private KafkaProducer<String, String> producer(String txnId, int timeoutMs) {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
    props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
    props.put(ProducerConfig.LINGER_MS_CONFIG, 0);
    props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30_000);
    props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 20_000);
    props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30_000);
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    KafkaProducer<String, String> producer = new KafkaProducer<>(props);
    producer.initTransactions();
    return producer;
  }

  /** Send and wait; the record's value names it, its offset is kept for the report. */
  private void send(KafkaProducer<String, String> producer, int partition, String value)
      throws Exception {
    long offset = producer.send(new ProducerRecord<>(topic, partition, value, value)).get().offset();
    sends.add("[" + quote(value) + "," + partition + "," + offset + "]");
    expectedEnd.merge(partition, offset + 1, Math::max);
    touched.computeIfAbsent(producer, k -> new java.util.TreeSet<>()).add(partition);
  }

  /**
   * Commit or abort, then wait until its markers are in the log. Kafka answers EndTxn once
   * PrepareCommit/PrepareAbort is durable and writes the markers after, so without the wait
   * the markers of two transactions ended one after the other may land in either order.
   */
  private void end(KafkaProducer<String, String> producer, boolean commit) throws Exception {
    if (commit) {
      producer.commitTransaction();
    } else {
      producer.abortTransaction();
    }
    markersFor(producer);
  }

  /** The producer's open transaction ends (by it or by the coordinator): wait for markers. */
  private void markersFor(KafkaProducer<String, String> producer) throws Exception {
    for (int p : touched.getOrDefault(producer, java.util.Set.of())) {
      expectedEnd.merge(p, 1L, Long::sum);
    }
    touched.remove(producer);
    long deadline = System.currentTimeMillis() + READ_DEADLINE.toMillis();
    while (!endOffsets("read_uncommitted").equals(expectedEnd)) {
      if (System.currentTimeMillis() > deadline) {
        throw new IllegalStateException("markers not written: " + endOffsets("read_uncommitted")
            + " != " + expectedEnd);
      }
      Thread.sleep(20);
    }
  }

  private String scenario(String prefix) throws Exception {
    StringBuilder out = new StringBuilder("{");
    String openOffsets;
    String afterFence;
    try (KafkaProducer<String, String> a = producer(prefix + "-a", 60_000);
        KafkaProducer<String, String> b = producer(prefix + "-b", 60_000)) {
      a.beginTransaction();
      b.beginTransaction();
      send(a, 0, "a1-0");
      send(b, 0, "b1-0");
      send(a, 1, "a1-1");
      send(b, 1, "b1-1");
      send(a, 0, "a1-2");
      end(b, true);
      end(a, false);

      a.beginTransaction();
      send(a, 1, "a2-0");
      send(a, 1, "a2-1");
      end(a, true);

      b.beginTransaction();
      send(b, 0, "b2-0");
      end(b, false);

      a.beginTransaction();
      send(a, 0, "a3-0");
      b.beginTransaction();
      send(b, 1, "b3-0");
      send(a, 1, "a3-1");
      end(a, true);
      send(b, 0, "b3-1");
      end(b, false);

      a.beginTransaction();
      send(a, 0, "a4-0");
      openOffsets = listOffsets();
      System.out.println("OPEN");
      System.out.flush();
      new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();

      try (KafkaProducer<String, String> a2 = producer(prefix + "-a", 60_000)) {
        markersFor(a); // the new instance's initTransactions aborted A's transaction
        afterFence = listOffsets();
        String sendError = error(() -> send(a, 1, "a4-1"));
        String commitError = error(a::commitTransaction);
        String abortError = error(a::abortTransaction);
        out.append("\"zombie_send\":").append(quote(sendError));
        out.append(",\"zombie_commit\":").append(quote(commitError));
        out.append(",\"zombie_abort\":").append(quote(abortError)).append(",");
        a2.beginTransaction();
        send(a2, 0, "a5-0");
        send(a2, 1, "a5-1");
        end(a2, true);
      }
    }
    out.append("\"sends\":[").append(String.join(",", sends)).append("]");
    out.append(",\"offsets_open\":").append(openOffsets);
    out.append(",\"offsets_after_fence\":").append(afterFence);
    out.append(",\"offsets_end\":").append(listOffsets());
    out.append(",\"read_committed\":").append(readAll("read_committed"));
    out.append(",\"read_uncommitted\":").append(readAll("read_uncommitted"));
    admin.close();
    return out.append("}").toString();
  }

  private void hang(String txnId) throws Exception {
    KafkaProducer<String, String> producer = producer(txnId, 900_000);
    producer.beginTransaction();
    send(producer, 0, "hang-0");
    send(producer, 1, "hang-1");
    System.out.println("SENT " + String.join(",", sends));
    System.out.flush();
    Thread.sleep(Long.MAX_VALUE);
  }

  private interface Step {
    void run() throws Exception;
  }

  /** The simple name of the exception `step` ends in (its cause's, for a future's), or "". */
  private static String error(Step step) {
    try {
      step.run();
      return "";
    } catch (ExecutionException e) {
      return e.getCause().getClass().getSimpleName();
    } catch (Exception e) {
      return e.getClass().getSimpleName();
    }
  }

  private Admin admin;

  /** Latest offsets of partitions 0 and 1 under `isolation` (ListOffsets). */
  private Map<Integer, Long> endOffsets(String isolation) throws Exception {
    if (admin == null) {
      Properties props = new Properties();
      props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      admin = Admin.create(props);
    }
    Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
    for (int p = 0; p < 2; p++) {
      specs.put(new TopicPartition(topic, p), OffsetSpec.latest());
    }
    IsolationLevel level = IsolationLevel.valueOf(isolation.toUpperCase());
    Map<Integer, Long> latest = new TreeMap<>();
    admin.listOffsets(specs, new ListOffsetsOptions(level)).all().get()
        .forEach((tp, info) -> latest.put(tp.partition(), info.offset()));
    latest.keySet().retainAll(expectedEnd.keySet());
    return latest;
  }

  /** {"read_committed": {p: latest}, "read_uncommitted": {p: latest}} from Admin.listOffsets. */
  private String listOffsets() throws Exception {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    StringBuilder out = new StringBuilder("{");
    try (Admin admin = Admin.create(props)) {
      for (IsolationLevel level : IsolationLevel.values()) {
        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
        for (int p = 0; p < 2; p++) {
          specs.put(new TopicPartition(topic, p), OffsetSpec.latest());
        }
        Map<Integer, Long> latest = new TreeMap<>();
        admin.listOffsets(specs, new ListOffsetsOptions(level)).all().get()
            .forEach((tp, info) -> latest.put(tp.partition(), info.offset()));
        if (out.length() > 1) {
          out.append(",");
        }
        out.append(quote(level.toString().toLowerCase())).append(":").append(partitionMap(latest));
      }
    }
    return out.append("}").toString();
  }

  /** Every record up to the end offsets the isolation level sees: [[partition, offset, value]]. */
  private String readAll(String isolation) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    List<String> records = new ArrayList<>();
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
      consumer.assign(parts);
      consumer.seekToBeginning(parts);
      Map<TopicPartition, Long> ends = consumer.endOffsets(parts);
      long deadline = System.currentTimeMillis() + READ_DEADLINE.toMillis();
      while (System.currentTimeMillis() < deadline && !caughtUp(consumer, ends)) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          records.add("[" + r.partition() + "," + r.offset() + "," + quote(r.value()) + "]");
        }
      }
      Map<Integer, Long> positions = new TreeMap<>();
      for (TopicPartition tp : parts) {
        positions.put(tp.partition(), consumer.position(tp));
      }
      return "{\"records\":[" + String.join(",", records) + "],\"positions\":"
          + partitionMap(positions) + "}";
    }
  }

  private static boolean caughtUp(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> ends) {
    for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
      if (consumer.position(e.getKey()) < e.getValue()) {
        return false;
      }
    }
    return true;
  }

  private static String partitionMap(Map<Integer, Long> map) {
    List<String> parts = new ArrayList<>();
    map.forEach((p, o) -> parts.add("\"" + p + "\":" + o));
    return "{" + String.join(",", parts) + "}";
  }

  /** Values and exception names are printable ASCII: only quotes and backslashes need escaping. */
  private static String quote(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
