import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.3's KafkaShareConsumer and share-group Admin APIs against kgroupd, in one JVM.
 * Two implicit-mode consumers of one group on one partition take every record exactly once;
 * an explicit-mode consumer releases one record (delivered again, delivery count 2), rejects
 * one (never again) and accepts the rest; Admin.describeShareGroups and listGroups show the
 * groups; listShareGroupOffsets shows the start offsets and lag; alterShareGroupOffsets moves
 * a group back (its records come again); deleteShareGroupOffsets and deleteShareGroups remove
 * them. Prints one line "KGROUPD_SHARE <json>" (or "KGROUPD_SHARE_FAILED <message>").
 */
public final class KgroupdShareCheck {
    static String bootstrap;
    static String topic;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        topic = args[1];
        String implicitGroup = args[2] + "-implicit";
        String explicitGroup = args[2] + "-explicit";
        Map<String, Object> out = new TreeMap<>();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            for (String g : List.of(implicitGroup, explicitGroup)) {
                ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, g);
                admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET)))).all().get();
            }
            produce(0, 100);

            // implicit mode: two consumers, every record once
            KafkaShareConsumer<String, String> a = consumer(implicitGroup, "implicit");
            KafkaShareConsumer<String, String> b = consumer(implicitGroup, "implicit");
            Map<Long, Integer> seen = new TreeMap<>();
            int[] per = new int[2];
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen.size() < 100 && System.currentTimeMillis() < deadline) {
                int i = 0;
                for (KafkaShareConsumer<String, String> c : List.of(a, b)) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        seen.merge(r.offset(), 1, Integer::sum);
                        per[i]++;
                    }
                    i++;
                }
            }
            // one more poll each: implicit acknowledgement of the last batches
            a.poll(Duration.ofMillis(200));
            b.poll(Duration.ofMillis(200));
            out.put("implicit_offsets", seen.size());
            out.put("implicit_duplicates", seen.values().stream().filter(n -> n > 1).count());
            out.put("implicit_deliveries", per[0] + per[1]);

            Map<String, ShareGroupDescription> described =
                admin.describeShareGroups(List.of(implicitGroup)).all().get();
            ShareGroupDescription d = described.get(implicitGroup);
            out.put("describe_state", d.groupState().toString());
            out.put("describe_members", d.members().size());
            Set<String> assigned = new TreeSet<>();
            for (ShareMemberDescription m : d.members()) {
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    assigned.add(tp.toString());
                }
            }
            out.put("describe_assigned", String.join(",", assigned));
            out.put("describe_epochs", d.groupEpoch() + "/" + d.targetAssignmentEpoch());
            a.close();
            b.close();

            // explicit mode: release 100 (again, count 2), reject 101 (never again)
            produce(100, 5);
            KafkaShareConsumer<String, String> e = consumer(explicitGroup, "explicit");
            List<String> deliveries = new ArrayList<>();
            deadline = System.currentTimeMillis() + 60_000;
            boolean released = false;
            int accepted = 0;
            while (System.currentTimeMillis() < deadline && accepted < 104) {
                for (ConsumerRecord<String, String> r : e.poll(Duration.ofMillis(300))) {
                    short count = r.deliveryCount().orElse((short) -1);
                    deliveries.add(r.offset() + ":" + count);
                    if (r.offset() == 100 && !released) {
                        e.acknowledge(r, AcknowledgeType.RELEASE);
                        released = true;
                    } else if (r.offset() == 101) {
                        e.acknowledge(r, AcknowledgeType.REJECT);
                    } else {
                        e.acknowledge(r, AcknowledgeType.ACCEPT);
                        accepted++;
                    }
                }
                Map<?, Optional<org.apache.kafka.common.KafkaException>> done = e.commitSync();
                for (Optional<org.apache.kafka.common.KafkaException> x : done.values()) {
                    if (x.isPresent()) {
                        throw x.get();
                    }
                }
            }
            // nothing more comes: 101 was rejected, the rest accepted
            long quiet = System.currentTimeMillis() + 2000;
            while (System.currentTimeMillis() < quiet) {
                for (ConsumerRecord<String, String> r : e.poll(Duration.ofMillis(300))) {
                    deliveries.add("late " + r.offset() + ":" + r.deliveryCount().orElse((short) -1));
                    e.acknowledge(r, AcknowledgeType.ACCEPT);
                }
            }
            e.close();
            deliveries.removeIf(s -> !s.startsWith("late") && Long.parseLong(s.split(":")[0]) < 100);
            out.put("explicit_deliveries", String.join(",", deliveries));

            Set<String> listed = new TreeSet<>();
            for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()) {
                listed.add(g.groupId() + ":" + g.type().map(Object::toString).orElse("?") + ":"
                    + g.groupState().map(Object::toString).orElse("?"));
            }
            out.put("listed", String.join(",", listed));

            TopicPartition tp = new TopicPartition(topic, 0);
            out.put("offsets_after", offsets(admin, explicitGroup, tp));
            admin.alterShareGroupOffsets(explicitGroup, Map.of(tp, 102L)).all().get();
            out.put("offsets_altered", offsets(admin, explicitGroup, tp));
            KafkaShareConsumer<String, String> again = consumer(explicitGroup, "explicit");
            List<Long> redelivered = new ArrayList<>();
            deadline = System.currentTimeMillis() + 30_000;
            while (redelivered.size() < 3 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : again.poll(Duration.ofMillis(300))) {
                    redelivered.add(r.offset());
                    again.acknowledge(r, AcknowledgeType.ACCEPT);
                }
                again.commitSync();
            }
            again.close();
            out.put("after_alter", redelivered.toString());

            admin.deleteShareGroupOffsets(explicitGroup, Set.of(topic)).all().get();
            out.put("offsets_deleted", offsets(admin, explicitGroup, tp));
            admin.deleteShareGroups(List.of(explicitGroup)).all().get();
            try {
                admin.describeShareGroups(List.of(explicitGroup)).all().get();
                out.put("describe_deleted", "found");
            } catch (ExecutionException x) {
                out.put("describe_deleted", x.getCause().getClass().getSimpleName());
            }
        } catch (Exception x) {
            System.out.println("KGROUPD_SHARE_FAILED " + x);
            x.printStackTrace();
            System.exit(1);
        }
        System.out.println("KGROUPD_SHARE " + json(out));
    }

    static String offsets(Admin admin, String group, TopicPartition tp) throws Exception {
        Map<TopicPartition, SharePartitionOffsetInfo> got = admin
            .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec()))
            .partitionsToOffsetInfo(group).get();
        SharePartitionOffsetInfo info = got.get(tp);
        if (info == null) {
            return "none";
        }
        return info.startOffset() + "/lag=" + info.lag().map(String::valueOf).orElse("?");
    }

    static KafkaShareConsumer<String, String> consumer(String group, String mode) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", mode);
        p.put("max.poll.records", "10");
        KafkaShareConsumer<String, String> c =
            new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    static void produce(int from, int n) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = from; i < from + n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "v" + i)).get();
            }
        }
    }

    static String json(Map<String, Object> m) {
        StringBuilder s = new StringBuilder("{");
        for (Map.Entry<String, Object> e : m.entrySet()) {
            if (s.length() > 1) {
                s.append(",");
            }
            s.append('"').append(e.getKey()).append("\":");
            Object v = e.getValue();
            if (v instanceof Number) {
                s.append(v);
            } else {
                s.append('"').append(String.valueOf(v).replace("\"", "'")).append('"');
            }
        }
        return s.append("}").toString();
    }
}
