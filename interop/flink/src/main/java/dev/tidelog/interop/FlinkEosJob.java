package dev.tidelog.interop;

import java.time.Duration;
import java.util.Properties;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.api.common.typeinfo.Types;

/**
 * Flink 2.0's KafkaSink with DeliveryGuarantee.EXACTLY_ONCE in a local MiniCluster for the
 * interop suite (issue 36): COUNT records "rec-0" .. "rec-{COUNT-1}" (a rate-limited
 * generator source, so several checkpoints happen mid-stream) go through a map that fails
 * the job once past record COUNT/2, 20 records after a checkpoint barrier; the job restarts from its last checkpoint, and the sink's
 * transactions (one per checkpoint) are committed only when a checkpoint completes, so a
 * read_committed reader of TOPIC sees every record exactly once.
 *
 * <p>Usage: FlinkEosJob BOOTSTRAP TOPIC TXN_PREFIX COUNT. Prints "DONE" when the job ends.
 */
public final class FlinkEosJob {
  private FlinkEosJob() {}

  /** Fails once per JVM (the MiniCluster restarts the task in this JVM). */
  static volatile boolean failed = false;

  /**
   * Fails the job once, past record `from` and at least AFTER_BARRIER records after the last
   * checkpoint barrier, so the failed attempt's open transaction surely holds records (which
   * read_committed must never show and read_uncommitted then shows twice).
   */
  static final class FailOnce implements MapFunction<String, String>, CheckpointedFunction {
    private static final int AFTER_BARRIER = 20;
    private final long from;
    private long seen;
    private long sinceBarrier;

    FailOnce(long from) {
      this.from = from;
    }

    @Override
    public String map(String value) {
      seen++;
      sinceBarrier++;
      if (!failed && seen > from && sinceBarrier >= AFTER_BARRIER) {
        failed = true;
        throw new IllegalStateException("injected failure at " + value);
      }
      return value;
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) {
      sinceBarrier = 0;
    }

    @Override
    public void initializeState(FunctionInitializationContext context) {
      seen = 0;
      sinceBarrier = 0;
    }
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String prefix = args[2];
    long count = Long.parseLong(args[3]);

    Configuration conf = new Configuration();
    conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 3);
    conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(500));
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setRuntimeMode(RuntimeExecutionMode.STREAMING);
    env.setParallelism(1);
    env.enableCheckpointing(500);

    DataGeneratorSource<String> source = new DataGeneratorSource<>(
        i -> "rec-" + i, count, RateLimiterStrategy.perSecond(200), Types.STRING);

    Properties producer = new Properties();
    producer.setProperty("transaction.timeout.ms", "60000");
    KafkaSink<String> sink = KafkaSink.<String>builder()
        .setBootstrapServers(bootstrap)
        .setKafkaProducerConfig(producer)
        .setRecordSerializer(KafkaRecordSerializationSchema.builder()
            .setTopic(topic)
            .setValueSerializationSchema(new SimpleStringSchema())
            .build())
        .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .setTransactionalIdPrefix(prefix)
        .build();

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "records")
        .map(new FailOnce(count / 2))
        .sinkTo(sink);
    env.execute("flink-eos-" + topic);
    System.out.println("DONE failed=" + failed);
  }
}
