package dev.tidelog.interop;

import java.util.Arrays;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams exactly_once_v2 for the interop suite (issue 36): lines of words are split,
 * re-keyed by word (a repartition topic), counted (a state store with a changelog) and
 * every new count is written to the output topic (no record cache, so every update is
 * forwarded). Exactly once means that a read_committed reader of the output sees, for each
 * word, the counts 1, 2, ..., n: no count twice, none missing, whatever was killed.
 *
 * <p>Usage: WordCountApp BOOTSTRAP APPLICATION_ID STATE_DIR INPUT OUTPUT. Prints
 * "STATE RUNNING" once running (and every later state); runs until killed.
 */
public final class WordCountApp {
  private WordCountApp() {}

  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    // A broker killed and restarted mid-stream: keep retrying rather than fail the task.
    props.put(StreamsConfig.TASK_TIMEOUT_MS_CONFIG, 300_000);

    StreamsBuilder builder = new StreamsBuilder();
    builder.<String, String>stream(args[3])
        .flatMapValues(line -> Arrays.asList(line.split(" ")))
        .groupBy((key, word) -> word, Grouped.as("words"))
        .count(Materialized.as("counts"))
        .toStream()
        .mapValues(String::valueOf)
        .to(args[4], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setStateListener((now, before) -> System.out.println("STATE " + now));
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
          .StreamThreadExceptionResponse.REPLACE_THREAD;
    });
    Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
    streams.start();
    Thread.currentThread().join();
  }
}
