import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A rolling upgrade of a classic group to the consumer protocol (KIP-848 online migration)
 * with kafka-clients 4.3, in one JVM: three members with group.protocol=classic share six
 * partitions while a producer keeps writing; one at a time, each is closed and replaced by a
 * member with group.protocol=consumer. Every rebalance callback updates one ownership map, so
 * a partition owned by two members at once is caught. Prints one line
 * "KGROUPD_ROLLING_UPGRADE <json>".
 * Args: BOOTSTRAP TOPIC GROUP RECORDS
 */
public final class KgroupdRollingUpgrade {
    static final Map<TopicPartition, String> OWNER = new ConcurrentHashMap<>();
    static final List<String> DOUBLE = Collections.synchronizedList(new ArrayList<>());
    static final Set<String> SEEN = ConcurrentHashMap.newKeySet();
    static final AtomicInteger DUPLICATES = new AtomicInteger();

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final AtomicBoolean stop = new AtomicBoolean();
        final Set<TopicPartition> assigned = ConcurrentHashMap.newKeySet();
        volatile String error;
        Thread thread;

        Member(String bootstrap, String group, String name, String protocol, String topic) {
            this.name = name;
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("group.protocol", protocol);
            p.put("client.id", name);
            p.put("auto.offset.reset", "earliest");
            p.put("enable.auto.commit", "false");
            if (protocol.equals("classic")) {
                p.put("session.timeout.ms", "6000");
                p.put("heartbeat.interval.ms", "300");
            }
            p.put("key.deserializer", StringDeserializer.class.getName());
            p.put("value.deserializer", StringDeserializer.class.getName());
            consumer = new KafkaConsumer<>(p);
            consumer.subscribe(List.of(topic), this);
            thread = new Thread(this, name);
            thread.start();
        }

        @Override
        public void run() {
            try {
                while (!stop.get()) {
                    ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, String> r : batch) {
                        if (!SEEN.add(r.value())) DUPLICATES.incrementAndGet();
                    }
                    if (!batch.isEmpty()) {
                        try {
                            consumer.commitSync();
                        } catch (Exception e) {
                            // a commit racing a rebalance: the records may be read again
                        }
                    }
                }
            } catch (Exception e) {
                error = name + ": " + e;
            } finally {
                consumer.close();
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            for (TopicPartition tp : parts) {
                String held = OWNER.putIfAbsent(tp, name);
                if (held != null && !held.equals(name)) DOUBLE.add(tp + " " + held + "+" + name);
                OWNER.put(tp, name);
            }
            assigned.addAll(parts);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            assigned.removeAll(parts);
            for (TopicPartition tp : parts) OWNER.remove(tp, name);
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(20000);
        }
    }

    static void await(String what, java.util.function.BooleanSupplier ok) throws Exception {
        long deadline = System.currentTimeMillis() + 40000;
        while (!ok.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("timed out: " + what);
            Thread.sleep(50);
        }
    }

    static boolean settled(List<Member> members) {
        int sum = 0;
        for (Member m : members) {
            if (m.assigned.isEmpty()) return false;
            sum += m.assigned.size();
        }
        return sum == 6;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int total = Integer.parseInt(args[3]);
        StringBuilder json = new StringBuilder("{");
        String step = "start";
        List<Member> members = new ArrayList<>();
        List<String> errors = new ArrayList<>();
        AtomicInteger produced = new AtomicInteger();
        AtomicBoolean producing = new AtomicBoolean(true);
        Thread producer = null;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            step = "createTopic";
            admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1))).all().get();
            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("linger.ms", "5");
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            producer = new Thread(() -> {
                try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
                    for (int i = 0; i < total; i++) {
                        p.send(new ProducerRecord<>(topic, i % 6, null, "r" + i)).get();
                        produced.incrementAndGet();
                        if (!producing.get()) Thread.sleep(0);
                        else Thread.sleep(i % 50 == 0 ? 5 : 0);
                    }
                } catch (Exception e) {
                    errors.add("producer: " + e);
                }
            }, "producer");
            producer.start();

            step = "classic";
            for (int i = 0; i < 3; i++) members.add(new Member(bootstrap, group, "classic-" + i, "classic", topic));
            await("a stable classic group", () -> settled(members));
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            json.append("\"type_before\":\"").append(d.type()).append('"');

            for (int i = 0; i < 3; i++) {
                step = "upgrade-" + i;
                Member old = members.get(i);
                old.close();
                if (old.error != null) errors.add(old.error);
                Member next = new Member(bootstrap, group, "consumer-" + i, "consumer", topic);
                members.set(i, next);
                await("member " + i + " upgraded and every partition owned", () -> settled(members));
                if (i == 0) {
                    d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                    json.append(",\"type_mixed\":\"").append(d.type()).append('"');
                    json.append(",\"members_mixed\":").append(d.members().size());
                }
            }
            step = "drain";
            producer.join(60000);
            await("every record", () -> SEEN.size() >= total);
            d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            json.append(",\"type_after\":\"").append(d.type()).append('"');
            json.append(",\"members_after\":").append(d.members().size());
            json.append(",\"consumed\":").append(SEEN.size());
            json.append(",\"duplicates\":").append(DUPLICATES.get());
            json.append(",\"ok\":true");
        } catch (Exception e) {
            json.append(json.length() > 1 ? "," : "").append("\"ok\":false,\"step\":\"").append(step)
                .append("\",\"exception\":\"").append(String.valueOf(e).replace("\"", "'")).append('"');
        } finally {
            producing.set(false);
            for (Member m : members) {
                m.close();
                if (m.error != null) errors.add(m.error);
            }
        }
        json.append(",\"double_owned\":").append(DOUBLE.size());
        json.append(",\"double\":\"").append(String.join(";", DOUBLE)).append('"');
        json.append(",\"errors\":\"").append(String.join(";", errors).replace("\"", "'")).append('"');
        json.append('}');
        System.out.println("KGROUPD_ROLLING_UPGRADE " + json);
        System.out.flush();
        System.exit(0);
    }
}
