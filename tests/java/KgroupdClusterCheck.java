import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The Java Admin's cluster and topic description APIs against kgroupd (issue 29). Usage:
 *
 * <pre>
 *   KgroupdClusterCheck BOOTSTRAP TOPIC
 * </pre>
 *
 * <p>TOPIC has 3 partitions and 5 records in partition 0. describeCluster (with authorized
 * operations); describeTopics with a page of 2 partitions (DescribeTopicPartitions, so two
 * answers); describeLogDirs; electLeaders; list and alter partition reassignments; alter
 * and describe client quotas; describeConfigs of __consumer_offsets; a consumer seeking to
 * offset 2 with leader epoch 0 (validated with OffsetForLeaderEpoch) reads from there. Prints
 * {@code KGROUPD_CLUSTER <json>}; exit 0 when every call returned.
 */
public final class KgroupdClusterCheck {
    private static String q(Object value) {
        return "\"" + String.valueOf(value).replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        List<String> out = new ArrayList<>();
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(p)) {
            DescribeClusterResult cluster =
                    admin.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
            Collection<Node> nodes = cluster.nodes().get();
            Node node = nodes.iterator().next();
            out.add("\"cluster_id\":" + q(cluster.clusterId().get()));
            out.add("\"nodes\":" + nodes.size());
            out.add("\"node\":" + q(node.host() + ":" + node.port()));
            out.add("\"controller\":" + cluster.controller().get().id());
            out.add("\"node_id\":" + node.id());
            out.add("\"cluster_ops\":" + cluster.authorizedOperations().get().size());

            TopicDescription described = admin.describeTopics(
                            List.of(topic),
                            new DescribeTopicsOptions().partitionSizeLimitPerResponse(2)
                                    .includeAuthorizedOperations(true))
                    .allTopicNames().get().get(topic);
            out.add("\"partitions\":" + described.partitions().size());
            out.add("\"leader\":" + described.partitions().get(2).leader().id());
            out.add("\"topic_ops\":" + described.authorizedOperations().size());

            Map<String, LogDirDescription> dirs =
                    admin.describeLogDirs(List.of(node.id())).allDescriptions().get().get(node.id());
            LogDirDescription dir = dirs.values().iterator().next();
            out.add("\"log_dirs\":" + dirs.size());
            out.add("\"partition_size\":" + dir.replicaInfos().get(new TopicPartition(topic, 0)).size());
            out.add("\"total_bytes\":" + dir.totalBytes().orElse(-1));

            TopicPartition tp = new TopicPartition(topic, 0);
            Map<TopicPartition, Optional<Throwable>> elected =
                    admin.electLeaders(ElectionType.PREFERRED, Set.of(tp)).partitions().get();
            out.add("\"election\":" + q(elected.get(tp).map(e -> e.getClass().getSimpleName()).orElse("none")));

            Map<TopicPartition, PartitionReassignment> ongoing =
                    admin.listPartitionReassignments().reassignments().get();
            out.add("\"reassignments\":" + ongoing.size());
            admin.alterPartitionReassignments(
                            Map.of(tp, Optional.of(new NewPartitionReassignment(List.of(node.id())))))
                    .all().get();
            out.add("\"reassigned\":true");

            ClientQuotaEntity alice = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
            admin.alterClientQuotas(List.of(new ClientQuotaAlteration(
                            alice, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0)))))
                    .all().get();
            Map<ClientQuotaEntity, Map<String, Double>> quotas =
                    admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            out.add("\"alice_quota\":" + quotas.get(alice).get("producer_byte_rate"));

            ConfigResource offsets = new ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets");
            Config config = admin.describeConfigs(List.of(offsets)).all().get().get(offsets);
            ConfigEntry policy = config.get("cleanup.policy");
            out.add("\"offsets_policy\":" + q(policy.value() + "/" + policy.source()));
        }
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, topic + "-epoch-check");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long first = -1;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seek(tp, new OffsetAndMetadata(2, Optional.of(0), ""));
            long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            while (first < 0 && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    first = r.offset();
                    break;
                }
            }
        }
        out.add("\"consumer_first\":" + first);
        System.out.println("KGROUPD_CLUSTER {" + String.join(",", out) + "}");
    }
}
