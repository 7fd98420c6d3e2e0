import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.3 against kgroupd: an explicit-mode KafkaShareConsumer renews its records'
 * locks (AcknowledgeType.RENEW, KIP-1222) where the group allows it (the renewed records come
 * back from the next poll and are accepted) and is refused where
 * share.renew.acknowledge.enable=false; a KafkaConsumer of either protocol
 * (classic, consumer) given a share group's id is refused. Prints one line
 * "KGROUPD_RENEW <json>" (or "KGROUPD_RENEW_FAILED <message>").
 */
public final class KgroupdShareRenewCheck {
    static String bootstrap;
    static String topic;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        topic = args[1];
        Map<String, Object> out = new TreeMap<>();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            for (String g : List.of("renew-on", "renew-off")) {
                List<AlterConfigOp> ops = new ArrayList<>();
                ops.add(set("share.auto.offset.reset", "earliest"));
                if (g.equals("renew-off")) {
                    ops.add(set("share.renew.acknowledge.enable", "false"));
                }
                ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, g);
                admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
            }
            produce(3);
            for (String g : List.of("renew-on", "renew-off")) {
                KafkaShareConsumer<String, String> c = shareConsumer(g);
                List<ConsumerRecord<String, String>> held = new ArrayList<>();
                long deadline = System.currentTimeMillis() + 60_000;
                // the records of one poll, renewed as they come (explicit mode)
                while (held.isEmpty() && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        c.acknowledge(r, AcknowledgeType.RENEW);
                        held.add(r);
                    }
                }
                out.put(g + "_held", held.size());
                out.put(g + "_renew", outcome(c.commitSync(Duration.ofSeconds(30))));
                // renewed records come back from the next poll (still delivery count 1, not
                // redelivered), to be acknowledged for good
                List<String> back = new ArrayList<>();
                deadline = System.currentTimeMillis() + 10_000;
                while (back.isEmpty() && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        back.add(r.offset() + "/" + r.deliveryCount().orElse((short) -1));
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                }
                out.put(g + "_back", String.join(",", back));
                out.put(g + "_accept", back.isEmpty() ? "none" : outcome(c.commitSync()));
                c.close();
            }
            // the share group's id is no classic or consumer group's
            for (String protocol : List.of("classic", "consumer")) {
                Properties p = new Properties();
                p.put("bootstrap.servers", bootstrap);
                p.put("group.id", "renew-on");
                p.put("group.protocol", protocol);
                try (KafkaConsumer<String, String> k =
                         new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
                    k.subscribe(List.of(topic));
                    String got = "no error";
                    long deadline = System.currentTimeMillis() + 30_000;
                    while (got.equals("no error") && System.currentTimeMillis() < deadline) {
                        try {
                            k.poll(Duration.ofMillis(200));
                        } catch (KafkaException x) {
                            got = x.getClass().getSimpleName();
                        }
                    }
                    out.put("join_" + protocol, got);
                }
            }
        } catch (Exception x) {
            System.out.println("KGROUPD_RENEW_FAILED " + x);
            x.printStackTrace();
            System.exit(1);
        }
        System.out.println("KGROUPD_RENEW " + KgroupdShareCheck.json(out));
    }

    static AlterConfigOp set(String name, String value) {
        return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    static String outcome(Map<TopicIdPartition, Optional<KafkaException>> done) {
        List<String> parts = new ArrayList<>();
        for (Optional<KafkaException> e : done.values()) {
            parts.add(e.map(x -> x.getClass().getSimpleName()).orElse("ok"));
        }
        return String.join(",", parts);
    }

    static KafkaShareConsumer<String, String> shareConsumer(String group) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        KafkaShareConsumer<String, String> c =
            new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
        c.subscribe(List.of(topic));
        return c;
    }

    static void produce(int n) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, "v" + i)).get();
            }
        }
    }
}
