import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.3 transactions against kgroupd, in one JVM (the processor of the
 * consume-transform-produce step runs in child JVMs so it can be SIGKILLed):
 *
 * <ul>
 *   <li>commit, abort, commit across three partitions of each of two topics; read_committed
 *       consumers see exactly the committed records, read_uncommitted ones all of them;
 *   <li>zombie fencing: a second producer with the same transactional id fences the first,
 *       whose commit fails; the successor commits;
 *   <li>consume-transform-produce: RECORDS inputs, the processor (group.protocol GROUP_PROTOCOL,
 *       sendOffsetsToTransaction with the consumer's group metadata) killed after a third and
 *       restarted; the output read with read_committed holds each input's output once, and
 *       the group's committed offsets are the input's end offsets.
 * </ul>
 *
 * Prints one line "KGROUPD_TRANSACTIONS <json>". Arguments: BOOTSTRAP PREFIX RECORDS
 * GROUP_PROTOCOL, or for the child: ctp BOOTSTRAP PREFIX GROUP_PROTOCOL.
 */
public final class KgroupdTransactionsCheck {
    static final int PARTS = 3;
    static final int CTP_PARTS = 6;
    static final long IDLE_MS = 4000;

    static Properties producerProps(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        if (txnId != null) p.put("transactional.id", txnId);
        return p;
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group, String protocol) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        if (group != null) {
            p.put("group.id", group);
            p.put("group.protocol", protocol);
            if (protocol.equals("classic")) {
                // a static member: the restarted processor takes the killed one's place at once
                p.put("group.instance.id", group + "-processor");
                p.put("session.timeout.ms", "6000");
            }
        }
        return new KafkaConsumer<>(p);
    }

    /** Every value below the end offsets (the LSO under read_committed) of these partitions. */
    static List<String> readAll(String bootstrap, String isolation, List<TopicPartition> tps) {
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, isolation, null, null)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            long deadline = System.currentTimeMillis() + 30_000;
            while (tps.stream().anyMatch(tp -> c.position(tp) < ends.get(tp))) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("reading " + tps + " timed out");
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    if (r.offset() < ends.get(new TopicPartition(r.topic(), r.partition()))) values.add(r.value());
                }
            }
        }
        return values;
    }

    static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < n; p++) tps.add(new TopicPartition(topic, p));
        return tps;
    }

    /** The child: consume-transform-produce until IDLE_MS pass with nothing to read. */
    static void ctp(String bootstrap, String prefix, String protocol) {
        String in = prefix + "-in", out = prefix + "-out", group = prefix + "-ctp";
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", group, protocol);
             KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, prefix + "-ctp-txn"))) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long idle = System.currentTimeMillis();
            int processed = 0;
            while (System.currentTimeMillis() - idle < IDLE_MS) {
                ConsumerRecords<String, String> batch = c.poll(Duration.ofMillis(200));
                if (batch.isEmpty()) continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : batch) {
                    p.send(new ProducerRecord<>(out, r.partition(), null, "out-" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                processed += batch.count();
                System.out.println("processed " + processed);
                System.out.flush();
                idle = System.currentTimeMillis();
            }
        }
    }

    static Process startChild(String bootstrap, String prefix, String protocol) throws Exception {
        return new ProcessBuilder(
                System.getProperty("java.home") + "/bin/java",
                "-cp", System.getProperty("java.class.path"),
                "-Dslf4j.provider=StderrSlf4jProvider",
                KgroupdTransactionsCheck.class.getName(), "ctp", bootstrap, prefix, protocol)
            .redirectError(ProcessBuilder.Redirect.INHERIT)
            .start();
    }

    /** Two producers with one transactional id: the first, fenced by the second's
     * initTransactions, sends again (or only commits); the exception it gets, by class. */
    static String zombie(String bootstrap, String txnId, String topic, boolean sendAgain) throws Exception {
        String error = "none";
        KafkaProducer<String, String> z1 = new KafkaProducer<>(producerProps(bootstrap, txnId));
        z1.initTransactions();
        z1.beginTransaction();
        z1.send(new ProducerRecord<>(topic, 0, null, "zombie-" + txnId + "-1")).get();
        try (KafkaProducer<String, String> z2 = new KafkaProducer<>(producerProps(bootstrap, txnId))) {
            z2.initTransactions();  // fences z1 and aborts its open transaction
            try {
                if (sendAgain) z1.send(new ProducerRecord<>(topic, 0, null, "zombie-" + txnId + "-2"));
                z1.commitTransaction();
            } catch (Exception e) {
                error = e.getClass().getSimpleName();
            }
            z2.beginTransaction();
            z2.send(new ProducerRecord<>(topic, 0, null, "successor-" + txnId));
            z2.commitTransaction();
        } finally {
            z1.close(Duration.ZERO);
        }
        return error;
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("ctp")) {
            ctp(args[1], args[2], args[3]);
            return;
        }
        String bootstrap = args[0], prefix = args[1], protocol = args[3];
        int records = Integer.parseInt(args[2]);
        StringBuilder json = new StringBuilder("{");
        String step = "start";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            step = "createTopics";
            String a = prefix + "-a", b = prefix + "-b", in = prefix + "-in", out = prefix + "-out";
            admin.createTopics(List.of(
                new NewTopic(a, PARTS, (short) 1), new NewTopic(b, PARTS, (short) 1),
                new NewTopic(in, CTP_PARTS, (short) 1), new NewTopic(out, CTP_PARTS, (short) 1))).all().get();

            step = "commit-abort";
            Set<String> committed = new TreeSet<>(), all = new TreeSet<>();
            try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, prefix + "-tx"))) {
                p.initTransactions();
                for (String txn : List.of("c1", "a2", "c3")) {
                    p.beginTransaction();
                    for (String topic : List.of(a, b)) {
                        for (int part = 0; part < PARTS; part++) {
                            String v = txn + "-" + topic + "-" + part;
                            p.send(new ProducerRecord<>(topic, part, null, v));
                            all.add(v);
                            if (txn.startsWith("c")) committed.add(v);
                        }
                    }
                    if (txn.startsWith("c")) {
                        p.commitTransaction();
                    } else {
                        p.flush();  // abortTransaction drops records not yet sent
                        p.abortTransaction();
                    }
                }
            }
            List<TopicPartition> both = new ArrayList<>(partitions(a, PARTS));
            both.addAll(partitions(b, PARTS));
            List<String> rc = readAll(bootstrap, "read_committed", both);
            List<String> ru = readAll(bootstrap, "read_uncommitted", both);
            json.append("\"read_committed_exact\":").append(rc.size() == committed.size() && new TreeSet<>(rc).equals(committed));
            json.append(",\"read_uncommitted_all\":").append(ru.size() == all.size() && new TreeSet<>(ru).equals(all));
            json.append(",\"committed\":").append(rc.size()).append(",\"uncommitted\":").append(ru.size());

            step = "zombie";
            // A fenced producer's next send fails (Produce: INVALID_PRODUCER_EPOCH), and so does
            // its next commit without a send (EndTxn: PRODUCER_FENCED).
            String sendError = zombie(bootstrap, prefix + "-zombie-send", a, true);
            String commitError = zombie(bootstrap, prefix + "-zombie-commit", a, false);
            List<String> after = readAll(bootstrap, "read_committed", partitions(a, 1));
            json.append(",\"zombie_send_error\":\"").append(sendError).append('"');
            json.append(",\"zombie_commit_error\":\"").append(commitError).append('"');
            json.append(",\"zombie_visible\":").append(after.stream().anyMatch(v -> v.startsWith("zombie")));
            json.append(",\"successors_visible\":").append(after.stream().filter(v -> v.startsWith("successor")).count());

            step = "ctp-input";
            try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap, null))) {
                for (int i = 0; i < records; i++) p.send(new ProducerRecord<>(in, i % CTP_PARTS, null, "i" + i));
            }
            step = "ctp-kill";
            Process first = startChild(bootstrap, prefix, protocol);
            BufferedReader lines = new BufferedReader(new InputStreamReader(first.getInputStream()));
            int processed = 0;
            for (String line; processed < records / 3 && (line = lines.readLine()) != null; ) {
                processed = Integer.parseInt(line.split(" ")[1]);
            }
            first.destroyForcibly().waitFor();  // SIGKILL, maybe inside a transaction
            json.append(",\"killed_after\":").append(processed);
            step = "ctp-restart";
            Process second = startChild(bootstrap, prefix, protocol);
            second.getInputStream().transferTo(java.io.OutputStream.nullOutputStream());
            json.append(",\"restart_exit\":").append(second.waitFor());

            step = "ctp-check";
            List<String> outputs = readAll(bootstrap, "read_committed", partitions(out, CTP_PARTS));
            Set<String> distinct = new HashSet<>(outputs);
            int missing = 0;
            for (int i = 0; i < records; i++) if (!distinct.contains("out-i" + i)) missing++;
            json.append(",\"outputs\":").append(outputs.size());
            json.append(",\"duplicates\":").append(outputs.size() - distinct.size());
            json.append(",\"missing\":").append(missing);
            Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(prefix + "-ctp").partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, Long> ends;
            try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_uncommitted", null, null)) {
                ends = c.endOffsets(partitions(in, CTP_PARTS));
            }
            boolean match = offsets.size() == CTP_PARTS;
            for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
                OffsetAndMetadata o = offsets.get(e.getKey());
                match &= o != null && o.offset() == e.getValue();
            }
            json.append(",\"offsets_match\":").append(match);
            json.append(",\"ok\":true}");
        } catch (Exception e) {
            json.append(json.length() > 1 ? "," : "").append("\"ok\":false,\"step\":\"").append(step)
                .append("\",\"exception\":\"").append(e.toString().replace("\"", "'")).append("\"}");
        }
        System.out.println("KGROUPD_TRANSACTIONS " + json);
        System.exit(0);
    }
}
