import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Java consumers of one classic group, for tests/integration/test_groups_new_partitions.py.
 * Usage:
 *
 * <pre>
 *   KgroupdNewPartitions BOOTSTRAP TOPIC GROUP MEMBERS
 * </pre>
 *
 * <p>Starts MEMBERS consumers ({@code group.protocol=classic}, {@code metadata.max.age.ms=1000} so
 * a topic that gains partitions is noticed within about a second), each polling on its own
 * thread, and prints one JSON object per line on stdout:
 *
 * <pre>
 *   {"event": "assigned", "member": "j0", "partitions": [0, 2], "generation": 3}
 *   {"event": "revoked", "member": "j0", "partitions": [0, 2]}
 *   {"event": "record", "member": "j0", "partition": 2, "value": "..."}
 *   {"event": "error", "member": "j0", "error": "..."}
 *   {"event": "done"}
 * </pre>
 *
 * <p>A line "stop" on stdin closes every consumer (LeaveGroup) and exits 0 (1 if a consumer
 * thread failed). The client's log goes to stderr.
 */
public final class KgroupdNewPartitions {
  private static final AtomicBoolean STOP = new AtomicBoolean();
  private static final AtomicBoolean FAILED = new AtomicBoolean();

  private KgroupdNewPartitions() {}

  private static synchronized void emit(String json) {
    System.out.println(json);
    System.out.flush();
  }

  private static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  private static String partitions(Collection<TopicPartition> tps) {
    TreeSet<Integer> sorted = new TreeSet<>();
    for (TopicPartition tp : tps) {
      sorted.add(tp.partition());
    }
    return sorted.toString();
  }

  private static void member(String bootstrap, String topic, String group, String name) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
    props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "kgroupd-new-partitions-" + name);
    props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "1000");
    props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
    props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "300");
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(
          List.of(topic),
          new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
              emit(
                  "{\"event\": \"revoked\", \"member\": "
                      + quote(name)
                      + ", \"partitions\": "
                      + partitions(revoked)
                      + "}");
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> assigned) {
              emit(
                  "{\"event\": \"assigned\", \"member\": "
                      + quote(name)
                      + ", \"partitions\": "
                      + partitions(assigned)
                      + ", \"generation\": "
                      + consumer.groupMetadata().generationId()
                      + "}");
            }
          });
      while (!STOP.get()) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
          emit(
              "{\"event\": \"record\", \"member\": "
                  + quote(name)
                  + ", \"partition\": "
                  + r.partition()
                  + ", \"value\": "
                  + quote(r.value())
                  + "}");
        }
      }
    } catch (RuntimeException e) {
      FAILED.set(true);
      emit("{\"event\": \"error\", \"member\": " + quote(name) + ", \"error\": " + quote(e.toString()) + "}");
    }
  }

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String topic = args[1];
    String group = args[2];
    int members = Integer.parseInt(args[3]);
    List<Thread> threads = new ArrayList<>();
    for (int i = 0; i < members; i++) {
      String name = "j" + i;
      Thread t = new Thread(() -> member(bootstrap, topic, group, name), "consumer-" + name);
      t.start();
      threads.add(t);
    }
    BufferedReader stdin =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    boolean stopped = false;
    while ((line = stdin.readLine()) != null) {
      if (line.trim().equals("stop")) {
        stopped = true;
        break;
      }
    }
    STOP.set(true);
    for (Thread t : threads) {
      t.join(20_000);
      if (t.isAlive()) {
        FAILED.set(true);
        emit("{\"event\": \"error\", \"error\": " + quote(t.getName() + " did not stop") + "}");
      }
    }
    if (stopped && !FAILED.get()) {
      emit("{\"event\": \"done\"}");
    }
    System.exit(stopped && !FAILED.get() ? 0 : 1);
  }
}
