package dev.tidelog.interop;

import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams at-least-once for the interop suite: orders (key order id, value
 * "customer") are re-keyed by customer (a repartition topic), aggregated into the sorted
 * set of that customer's order ids (a state store with a compacted changelog), and joined
 * with a GlobalKTable of customer names. The aggregate is a set union, so replaying records
 * after a kill (at-least-once) leaves the same final value per key on any broker.
 *
 * <p>Usage: StreamsApp BOOTSTRAP APPLICATION_ID STATE_DIR ORDERS CUSTOMERS OUTPUT. Prints
 * "STATE RUNNING" once running; runs until killed.
 */
public final class StreamsApp {
  private StreamsApp() {}

  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    StreamsBuilder builder = new StreamsBuilder();
    GlobalKTable<String, String> customers = builder.globalTable(args[4]);
    KStream<String, String> orders = builder.stream(args[3]);
    orders
        .map((orderId, customer) -> KeyValue.pair(customer, orderId))
        .groupByKey(Grouped.as("by-customer"))
        .aggregate(() -> "", (customer, orderId, ids) -> union(ids, orderId),
            Materialized.as("orders-by-customer"))
        .toStream()
        .join(customers, (customer, ids) -> customer, (ids, name) -> name + ":" + ids)
        .to(args[5], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setStateListener((now, before) -> System.out.println("STATE " + now));
    Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
    streams.start();
    Thread.currentThread().join();
  }

  /** The comma-separated sorted set `ids` with `id` added (idempotent). */
  static String union(String ids, String id) {
    TreeSet<String> set = new TreeSet<>();
    for (String part : ids.split(",")) {
      if (!part.isEmpty()) {
        set.add(part);
      }
    }
    set.add(id);
    return String.join(",", set);
  }
}
