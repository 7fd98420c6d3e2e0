import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DeletedRecords;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The Java Admin's DeleteRecords and IncrementalAlterConfigs against kgroupd. Usage:
 *
 * <pre>
 *   KgroupdAdminCheck BOOTSTRAP RECORDS_TOPIC BEFORE RETENTION_TOPIC
 * </pre>
 *
 * <p>deleteRecords moves partition 0 of RECORDS_TOPIC to BEFORE; listOffsets(earliest) and a
 * consumer with auto.offset.reset=earliest follow. incrementalAlterConfigs sets retention.ms
 * to 60000 on RETENTION_TOPIC (whose records are an hour old); describeConfigs shows it with
 * source DYNAMIC_TOPIC_CONFIG and listOffsets(earliest) shows the old records gone. Prints
 * {@code KGROUPD_ADMIN <json>}; exit 0 when every call returned.
 */
public final class KgroupdAdminCheck {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String recordsTopic = args[1];
        long before = Long.parseLong(args[2]);
        String retentionTopic = args[3];
        List<String> out = new ArrayList<>();
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            TopicPartition tp = new TopicPartition(recordsTopic, 0);
            DeletedRecords deleted =
                    admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(before)))
                            .lowWatermarks()
                            .get(tp)
                            .get();
            out.add("\"low_watermark\":" + deleted.lowWatermark());
            long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).all().get().get(tp).offset();
            out.add("\"earliest\":" + earliest);

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, retentionTopic);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("retention.ms", "60000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all().get();
            Config config = admin.describeConfigs(List.of(res)).all().get().get(res);
            ConfigEntry entry = config.get("retention.ms");
            out.add("\"retention_ms\":\"" + entry.value() + "\"");
            out.add("\"retention_source\":\"" + entry.source() + "\"");
            TopicPartition rtp = new TopicPartition(retentionTopic, 0);
            long retained = admin.listOffsets(Map.of(rtp, OffsetSpec.earliest())).all().get().get(rtp).offset();
            out.add("\"retention_earliest\":" + retained);
        }
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, recordsTopic + "-java-after-delete");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long first = -1;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            consumer.assign(List.of(new TopicPartition(recordsTopic, 0)));
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (first < 0 && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    first = r.offset();
                    break;
                }
            }
        }
        out.add("\"consumer_first\":" + first);
        System.out.println("KGROUPD_ADMIN {" + String.join(",", out) + "}");
    }
}
