import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.3 with group.protocol=consumer (KIP-848) against kgroupd, in one JVM: three
 * members share six partitions and consume every record once, committing; a fourth joins and
 * only the partitions that move are revoked (never owned twice); a static member restarts and
 * keeps its partitions; Admin.describeConsumerGroups shows the group; a broker-side regex
 * subscription (SubscriptionPattern, RE2) picks up a new matching topic. Prints one line
 * "KGROUPD_CONSUMER_PROTOCOL <json>".
 */
public final class KgroupdConsumerProtocolCheck {
    static final Map<TopicPartition, String> OWNER = new ConcurrentHashMap<>();
    static final List<String> DOUBLE = Collections.synchronizedList(new ArrayList<>());
    static final Set<String> SEEN = ConcurrentHashMap.newKeySet();
    static final AtomicInteger DUPLICATES = new AtomicInteger();
    // After the restart: records from before it read again (must stay 0).
    static final AtomicInteger OLD_REREAD = new AtomicInteger();
    static volatile int resumeBelow = -1;

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<String, String> consumer;
        final AtomicBoolean stop = new AtomicBoolean();
        final Set<TopicPartition> assigned = ConcurrentHashMap.newKeySet();
        final List<TopicPartition> revoked = Collections.synchronizedList(new ArrayList<>());
        final AtomicInteger records = new AtomicInteger();
        volatile String error;
        Thread thread;

        Member(String bootstrap, String group, String name, String instance) {
            this.name = name;
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("group.id", group);
            p.put("group.protocol", "consumer");
            p.put("client.id", name);
            p.put("auto.offset.reset", "earliest");
            p.put("enable.auto.commit", "false");
            if (instance != null) p.put("group.instance.id", instance);
            p.put("key.deserializer", StringDeserializer.class.getName());
            p.put("value.deserializer", StringDeserializer.class.getName());
            consumer = new KafkaConsumer<>(p);
        }

        Member start(String topic) {
            consumer.subscribe(List.of(topic), this);
            return run(name);
        }

        Member start(SubscriptionPattern pattern) {  // evaluated by the broker (RE2)
            consumer.subscribe(pattern, this);
            return run(name);
        }

        private Member run(String threadName) {
            thread = new Thread(this, threadName);
            thread.start();
            return this;
        }

        @Override
        public void run() {
            try {
                while (!stop.get()) {
                    ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, String> r : batch) {
                        if (!SEEN.add(r.value())) DUPLICATES.incrementAndGet();
                        if (Integer.parseInt(r.value().substring(1)) < resumeBelow) OLD_REREAD.incrementAndGet();
                        records.incrementAndGet();
                    }
                    if (!batch.isEmpty()) consumer.commitSync();
                }
            } catch (Exception e) {
                error = e.toString();
            } finally {
                consumer.close();
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            for (TopicPartition tp : parts) {
                String held = OWNER.put(tp, name);
                if (held != null && !held.equals(name)) DOUBLE.add(tp + " " + held + "->" + name);
            }
            assigned.addAll(parts);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            revoked.addAll(parts);
            assigned.removeAll(parts);
            for (TopicPartition tp : parts) OWNER.remove(tp, name);
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(15000);
        }
    }

    static void await(String what, java.util.function.BooleanSupplier ok) throws Exception {
        long deadline = System.currentTimeMillis() + 30000;
        while (!ok.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) throw new IllegalStateException("timed out: " + what);
            Thread.sleep(50);
        }
    }

    static Set<Integer> parts(Set<TopicPartition> tps) {
        Set<Integer> out = new TreeSet<>();
        for (TopicPartition tp : tps) out.add(tp.partition());
        return out;
    }

    /** The member killed without leaving: a second JVM (args: victim BOOTSTRAP TOPIC GROUP). */
    static void victim(String[] args) throws Exception {
        Member m = new Member(args[1], args[3], "victim", null).start(args[2]);
        while (m.assigned.isEmpty()) Thread.sleep(20);
        System.out.println("VICTIM_ASSIGNED " + m.assigned.size());
        System.out.flush();
        Thread.sleep(600000);  // until killed
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("victim")) {
            victim(args);
            return;
        }
        String bootstrap = args[0], topic = args[1], group = args[2];
        int total = Integer.parseInt(args[3]);
        StringBuilder json = new StringBuilder("{");
        String step = "start";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            step = "createTopic";
            admin.createTopics(List.of(new NewTopic(topic, 6, (short) 1))).all().get();
            step = "produce";
            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < total; i++) producer.send(new ProducerRecord<>(topic, i % 6, null, "r" + i));
            }
            step = "consume";
            List<Member> members = new ArrayList<>();
            for (int i = 0; i < 3; i++) members.add(new Member(bootstrap, group, "m" + i, i == 0 ? "static-0" : null).start(topic));
            await("every record", () -> SEEN.size() >= total);
            await("two partitions each", () -> members.stream().allMatch(m -> m.assigned.size() == 2));
            json.append("\"consumed\":").append(SEEN.size()).append(",\"duplicates\":").append(DUPLICATES.get());

            step = "fourth";
            Map<String, Set<TopicPartition>> before = new HashMap<>();
            for (Member m : members) { before.put(m.name, new HashSet<>(m.assigned)); m.revoked.clear(); }
            Member fourth = new Member(bootstrap, group, "m3", null).start(topic);
            members.add(fourth);
            await("the fourth member's partitions", () -> !fourth.assigned.isEmpty());
            await("six partitions owned", () -> members.stream().mapToInt(m -> m.assigned.size()).sum() == 6);
            boolean onlyMoved = true;
            for (Member m : members.subList(0, 3)) {
                Set<TopicPartition> moved = new HashSet<>(before.get(m.name));
                moved.removeAll(m.assigned);
                if (!new HashSet<>(m.revoked).equals(moved)) onlyMoved = false;
            }
            json.append(",\"only_moved_revoked\":").append(onlyMoved);
            json.append(",\"fourth\":").append(parts(fourth.assigned).size());

            step = "describe";
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            json.append(",\"type\":\"").append(d.type()).append('"');
            json.append(",\"state\":\"").append(d.groupState()).append('"');
            json.append(",\"members\":").append(d.members().size());
            json.append(",\"group_epoch\":").append(d.groupEpoch().orElse(-1));
            int described = 0;
            for (MemberDescription md : d.members()) described += md.assignment().topicPartitions().size();
            json.append(",\"described_partitions\":").append(described);

            step = "static-restart";
            Member stat = members.get(0);
            Set<TopicPartition> held = new HashSet<>(stat.assigned);
            for (Member m : members.subList(1, 4)) m.revoked.clear();
            stat.close();  // a static member leaves temporarily (epoch -2)
            Member again = new Member(bootstrap, group, "m0-again", "static-0").start(topic);
            members.set(0, again);
            await("the static member's partitions", () -> again.assigned.equals(held));
            boolean quiet = members.subList(1, 4).stream().allMatch(m -> m.revoked.isEmpty());
            json.append(",\"static_kept\":true,\"others_undisturbed\":").append(quiet);

            step = "regex";
            admin.createTopics(List.of(new NewTopic(topic + "-rx-a", 2, (short) 1))).all().get();
            Member rx = new Member(bootstrap, group + "-rx", "rx", null)
                .start(new SubscriptionPattern(topic + "-rx-.*"));
            members.add(rx);
            await("the first matching topic", () -> rx.assigned.size() == 2);
            admin.createTopics(List.of(new NewTopic(topic + "-rx-b", 2, (short) 1), new NewTopic("other-" + topic, 2, (short) 1))).all().get();
            await("the new matching topic", () -> rx.assigned.size() == 4);
            Set<String> rxTopics = new TreeSet<>();
            for (TopicPartition tp : rx.assigned) rxTopics.add(tp.topic());
            json.append(",\"regex_topics\":\"").append(String.join(",", rxTopics)).append('"');

            step = "killed";
            Process victim = new ProcessBuilder(
                    System.getProperty("java.home") + "/bin/java",
                    "-cp", System.getProperty("java.class.path"),
                    "-Dslf4j.provider=StderrSlf4jProvider",
                    KgroupdConsumerProtocolCheck.class.getName(), "victim", bootstrap, topic, group)
                .redirectError(ProcessBuilder.Redirect.DISCARD)
                .start();
            java.io.BufferedReader out = new java.io.BufferedReader(
                new java.io.InputStreamReader(victim.getInputStream()));
            String line = out.readLine();
            if (line == null || !line.startsWith("VICTIM_ASSIGNED")) throw new IllegalStateException("victim: " + line);
            List<Member> live = members.subList(0, 4);
            await("the victim's partitions released", () -> live.stream().mapToInt(m -> m.assigned.size()).sum() < 6);
            victim.destroyForcibly().waitFor();  // SIGKILL: no leave
            long killed = System.currentTimeMillis();
            await("the killed member's partitions back", () -> live.stream().mapToInt(m -> m.assigned.size()).sum() == 6);
            json.append(",\"killed_reassigned_ms\":").append(System.currentTimeMillis() - killed);

            step = "close";
            for (Member m : members) m.close();

            step = "resume";  // a new set of members resumes at the commits
            int seenBefore = SEEN.size();
            resumeBelow = total;
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = total; i < total + 300; i++) producer.send(new ProducerRecord<>(topic, i % 6, null, "r" + i));
            }
            List<Member> again2 = new ArrayList<>();
            for (int i = 0; i < 3; i++) again2.add(new Member(bootstrap, group, "n" + i, null).start(topic));
            await("300 new records", () -> SEEN.size() >= seenBefore + 300);
            Thread.sleep(500);
            for (Member m : again2) m.close();
            json.append(",\"resumed\":").append(SEEN.size() - seenBefore);
            json.append(",\"old_reread_after_resume\":").append(OLD_REREAD.get());
            StringBuilder errors = new StringBuilder();
            for (Member m : members) if (m.error != null) errors.append(m.error).append(';');
            json.append(",\"double_owned\":").append(DOUBLE.size());
            json.append(",\"errors\":\"").append(errors.toString().replace("\"", "'")).append('"');
            json.append(",\"ok\":true}");
        } catch (Exception e) {
            json.append(json.length() > 1 ? "," : "").append("\"ok\":false,\"step\":\"").append(step)
                .append("\",\"exception\":\"").append(e.toString().replace("\"", "'")).append("\"}");
        }
        System.out.println("KGROUPD_CONSUMER_PROTOCOL " + json);
        System.exit(0);
    }
}
