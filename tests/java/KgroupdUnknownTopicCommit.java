import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConsumerGroupOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * kafka-clients 4.3 committing offsets (Admin.alterConsumerGroupOffsets, an OffsetCommit) for a
 * topic that does not exist, a partition beyond a real topic's, and a real partition: prints
 * one line "KGROUPD_UNKNOWN_TOPIC {partition: outcome, ...}" where the outcome is "ok" or the
 * exception's class name. Arguments: BOOTSTRAP GROUP.
 */
public final class KgroupdUnknownTopicCommit {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1];
        Map<String, String> outcome = new LinkedHashMap<>();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(group + "-real", 2, (short) 1))).all().get();
            Map<TopicPartition, OffsetAndMetadata> offsets = new LinkedHashMap<>();
            offsets.put(new TopicPartition(group + "-nope", 0), new OffsetAndMetadata(5));
            offsets.put(new TopicPartition(group + "-real", 9), new OffsetAndMetadata(5));
            offsets.put(new TopicPartition(group + "-real", 1), new OffsetAndMetadata(5));
            AlterConsumerGroupOffsetsResult result = admin.alterConsumerGroupOffsets(group, offsets);
            for (TopicPartition tp : offsets.keySet()) {
                try {
                    result.partitionResult(tp).get();
                    outcome.put(tp.toString(), "ok");
                } catch (ExecutionException e) {
                    outcome.put(tp.toString(), e.getCause().getClass().getSimpleName());
                }
            }
        }
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<String, String> e : outcome.entrySet()) {
            if (json.length() > 1) json.append(',');
            json.append('"').append(e.getKey()).append("\":\"").append(e.getValue()).append('"');
        }
        System.out.println("KGROUPD_UNKNOWN_TOPIC " + json.append('}'));
        System.exit(0);
    }
}
