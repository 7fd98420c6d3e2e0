import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * kgroupd's Java reference-client check (kafka-clients 4.3). Usage:
 *
 * <pre>
 *   KgroupdCheck BOOTSTRAP roundtrip TOPIC RECORDS_PER_CODEC [CODEC,CODEC,...]
 * </pre>
 *
 * <p>roundtrip: the Admin client creates TOPIC (3 partitions), describes the cluster, the topic and
 * its configs, lists offsets; one idempotent producer (acks=all, the Java default) per codec
 * (default none,gzip,snappy,lz4,zstd) sends RECORDS_PER_CODEC records with keys and headers; then
 * the records are read back with the calls Spark's Kafka source makes: Admin.describeTopics and
 * Admin.listOffsets (earliest, latest, by timestamp), and a KafkaConsumer without a group that
 * uses assign, seekToBeginning/seekToEnd/position, seek and poll. Every record is checked: offset,
 * order, timestamp, key, value and headers.
 *
 * <p>The last stdout line is {@code KGROUPD_CHECK <json>}: {@code ok}, the {@code step} reached,
 * the figures observed and the first {@code errors}. Exit code 0 when ok, 1 when a check failed,
 * 2 when a client call threw (the exception is in the summary), 64 on bad usage.
 */
public final class KgroupdCheck {
    static final int PARTITIONS = 3;
    static final String RETENTION_MS = "86400000";
    static final int MAX_ERRORS = 20;
    static final int FETCH_PARTITION_BYTES = 1024;
    static final Duration API_TIMEOUT = Duration.ofSeconds(10);

    final String bootstrap;
    final Map<String, Object> summary = new LinkedHashMap<>();
    final Map<String, Object> stepMillis = new LinkedHashMap<>();
    final List<String> errors = new ArrayList<>();
    int errorCount;
    String step = "start";
    long stepStart = System.nanoTime();

    KgroupdCheck(String bootstrap) {
        this.bootstrap = bootstrap;
    }

    public static void main(String[] args) {
        if (args.length < 4 || !args[1].equals("roundtrip")) {
            System.err.println(
                    "usage: KgroupdCheck BOOTSTRAP roundtrip TOPIC RECORDS_PER_CODEC [CODEC,...]");
            System.exit(64);
        }
        List<String> codecs = Arrays.asList(
                (args.length > 4 ? args[4] : "none,gzip,snappy,lz4,zstd").split(","));
        KgroupdCheck check = new KgroupdCheck(args[0]);
        check.summary.put("mode", args[1]);
        int code;
        try {
            check.roundtrip(args[2], Integer.parseInt(args[3]), codecs);
            code = check.errors.isEmpty() ? 0 : 1;
        } catch (Throwable t) {
            Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
            check.summary.put("exception", cause.getClass().getName() + ": " + cause.getMessage());
            StringWriter trace = new StringWriter();
            t.printStackTrace(new PrintWriter(trace));
            System.err.println("step " + check.step + " threw:\n" + trace);
            code = 2;
        }
        String reached = check.step;
        check.step("done");
        check.summary.put("step", code == 2 ? reached : "done"); // where it threw, if it did
        check.summary.put("ok", code == 0);
        check.summary.put("error_count", check.errorCount);
        check.summary.put("errors", check.errors);
        check.summary.put("step_ms", check.stepMillis);
        System.out.println("KGROUPD_CHECK " + Json.write(check.summary));
        System.out.flush();
        System.exit(code);
    }

    // ---------------------------------------------------------------- the round trip

    void roundtrip(String topic, int perCodec, List<String> codecs) throws Exception {
        summary.put("topic", topic);
        summary.put("codecs", codecs);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        List<List<Expected>> expected = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            expected.add(new ArrayList<>());
        }

        try (Admin admin = Admin.create(adminConfig())) {
            step("describeCluster");
            DescribeClusterResult cluster = admin.describeCluster();
            summary.put("cluster_id", cluster.clusterId().get());
            Collection<Node> nodes = cluster.nodes().get();
            List<Object> nodeList = new ArrayList<>();
            for (Node node : nodes) {
                nodeList.add(node.id() + "@" + node.host() + ":" + node.port());
            }
            summary.put("nodes", nodeList);
            Node controller = cluster.controller().get();
            summary.put("controller", controller == null ? null : controller.id());

            step("createTopics");
            NewTopic newTopic = new NewTopic(topic, PARTITIONS, (short) 1)
                    .configs(Map.of("retention.ms", RETENTION_MS, "cleanup.policy", "delete"));
            admin.createTopics(List.of(newTopic)).all().get();

            step("createTopics(existing)");
            try {
                admin.createTopics(List.of(newTopic)).all().get();
                summary.put("create_existing", "no error");
            } catch (ExecutionException e) {
                summary.put("create_existing", e.getCause().getClass().getSimpleName());
            }

            step("describeTopics");
            TopicDescription description =
                    admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            List<Object> leaders = new ArrayList<>();
            List<Object> replicas = new ArrayList<>();
            for (TopicPartitionInfo info : description.partitions()) {
                leaders.add(info.leader() == null ? null : info.leader().id());
                replicas.add(info.replicas().size() + "/" + info.isr().size());
                check(info.partition() == leaders.size() - 1,
                        "describeTopics: partition " + info.partition() + " out of order");
            }
            summary.put("partitions", description.partitions().size());
            summary.put("leaders", leaders);
            summary.put("replicas_isr", replicas);
            summary.put("internal", description.isInternal());

            step("describeConfigs");
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config topicConfig =
                    admin.describeConfigs(List.of(topicResource)).all().get().get(topicResource);
            Map<String, Object> configs = new LinkedHashMap<>();
            for (String name : List.of("retention.ms", "cleanup.policy", "max.message.bytes")) {
                ConfigEntry entry = topicConfig.get(name);
                configs.put(name, entry == null ? null : entry.value() + " (" + entry.source() + ")");
            }
            summary.put("topic_configs", configs);
            summary.put("topic_config_count", topicConfig.entries().size());
            ConfigResource brokerResource = new ConfigResource(
                    ConfigResource.Type.BROKER, String.valueOf(nodes.iterator().next().id()));
            Config brokerConfig =
                    admin.describeConfigs(List.of(brokerResource)).all().get().get(brokerResource);
            summary.put("broker_config_count", brokerConfig.entries().size());

            step("listOffsets(empty)");
            summary.put("empty_earliest", offsets(admin, tps, OffsetSpec.earliest(), null));
            summary.put("empty_latest", offsets(admin, tps, OffsetSpec.latest(), null));

            long baseTimestamp = System.currentTimeMillis() - 60_000;
            Map<String, Object> produced = new LinkedHashMap<>();
            for (int c = 0; c < codecs.size(); c++) {
                String codec = codecs.get(c);
                step("produce(" + codec + ")");
                produced.put(codec, produce(topic, codec, c, perCodec, baseTimestamp, expected));
            }
            summary.put("produced", produced);

            // Spark's driver: describeTopics, then listOffsets for earliest and latest.
            step("listOffsets");
            List<Long> earliest = offsets(admin, tps, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED);
            List<Long> latest = offsets(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED);
            List<Long> latestCommitted = offsets(admin, tps, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED);
            summary.put("earliest", earliest);
            summary.put("latest", latest);
            summary.put("latest_read_committed", latestCommitted);
            for (int p = 0; p < PARTITIONS; p++) {
                check(earliest.get(p) == 0, "listOffsets earliest p" + p + " = " + earliest.get(p));
                check(latest.get(p) == expected.get(p).size(),
                        "listOffsets latest p" + p + " = " + latest.get(p) + ", produced " + expected.get(p).size());
                check(latestCommitted.get(p).equals(latest.get(p)),
                        "listOffsets latest read_committed p" + p + " = " + latestCommitted.get(p));
            }

            step("listOffsets(timestamp)");
            List<Object> byTimestamp = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                List<Expected> records = expected.get(p);
                if (records.isEmpty()) {
                    continue;
                }
                Expected middle = records.get(records.size() / 2);
                Expected last = records.get(records.size() - 1);
                TopicPartition tp = tps.get(p);
                ListOffsetsResultInfo found = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(middle.timestamp)))
                        .partitionResult(tp).get();
                ListOffsetsResultInfo beyond = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(last.timestamp + 1)))
                        .partitionResult(tp).get();
                byTimestamp.add(found.offset());
                check(found.offset() == middle.offset && found.timestamp() == middle.timestamp,
                        "listOffsets forTimestamp(" + middle.timestamp + ") p" + p + " = offset " + found.offset()
                                + " timestamp " + found.timestamp() + ", expected offset " + middle.offset);
                check(beyond.offset() == -1,
                        "listOffsets forTimestamp(after the last record) p" + p + " = " + beyond.offset()
                                + ", expected -1");
            }
            summary.put("by_timestamp", byTimestamp);
        }

        step("consume");
        consume(tps, expected);
    }

    Properties adminConfig() {
        Properties props = common("kgroupd-check-admin");
        props.put(AdminClientConfig.RETRIES_CONFIG, "3");
        return props;
    }

    Properties common(String clientId) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", clientId);
        props.put("request.timeout.ms", "5000");
        props.put("default.api.timeout.ms", String.valueOf(API_TIMEOUT.toMillis()));
        props.put("metadata.max.age.ms", "1000");
        props.put("reconnect.backoff.max.ms", "200");
        props.put("retry.backoff.max.ms", "200");
        return props;
    }

    List<Long> offsets(Admin admin, List<TopicPartition> tps, OffsetSpec spec, IsolationLevel isolation)
            throws Exception {
        Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
        for (TopicPartition tp : tps) {
            request.put(tp, spec);
        }
        Map<TopicPartition, ListOffsetsResultInfo> result = (isolation == null
                ? admin.listOffsets(request)
                : admin.listOffsets(request, new ListOffsetsOptions(isolation))).all().get();
        List<Long> offsets = new ArrayList<>();
        for (TopicPartition tp : tps) {
            offsets.add(result.get(tp).offset());
        }
        return offsets;
    }

    // ---------------------------------------------------------------- produce

    int produce(String topic, String codec, int codecIndex, int count, long baseTimestamp,
            List<List<Expected>> expected) throws Exception {
        Properties props = common("kgroupd-check-producer-" + codec);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        List<Future<RecordMetadata>> futures = new ArrayList<>(count);
        List<Expected> sent = new ArrayList<>(count);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                int global = codecIndex * count + i;
                int partition = global % PARTITIONS;
                List<Expected> partitionLog = expected.get(partition);
                Expected record = Expected.make(codec, i, partition, partitionLog.size(), baseTimestamp + global);
                partitionLog.add(record);
                sent.add(record);
                futures.add(producer.send(new ProducerRecord<>(
                        topic, partition, record.timestamp, record.key, record.value, record.headers)));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata metadata = futures.get(i).get(API_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                Expected record = sent.get(i);
                check(metadata.partition() == record.partition && metadata.offset() == record.offset
                                && metadata.timestamp() == record.timestamp,
                        "produce " + codec + " #" + i + ": acknowledged at p" + metadata.partition() + " offset "
                                + metadata.offset() + " timestamp " + metadata.timestamp() + ", expected p"
                                + record.partition + " offset " + record.offset + " timestamp " + record.timestamp);
            }
        }
        return count;
    }

    // ---------------------------------------------------------------- consume (Spark's calls)

    void consume(List<TopicPartition> tps, List<List<Expected>> expected) {
        Properties props = common("kgroupd-check-consumer");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none"); // as Spark's executors
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        // Below the size of most batches the producers make, so most fetches rely on the broker
        // returning one whole batch beyond the limit (KIP-74).
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(FETCH_PARTITION_BYTES));
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(2 * FETCH_PARTITION_BYTES));
        summary.put("max_partition_fetch_bytes", FETCH_PARTITION_BYTES);
        int total = 0;
        for (List<Expected> log : expected) {
            total += log.size();
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);

            // Spark's getAvailableOffsetRange: seekToBeginning/seekToEnd and position.
            step("consume(positions)");
            consumer.seekToBeginning(tps);
            List<Long> beginning = new ArrayList<>();
            for (TopicPartition tp : tps) {
                beginning.add(consumer.position(tp, API_TIMEOUT));
            }
            consumer.seekToEnd(tps);
            List<Long> end = new ArrayList<>();
            for (TopicPartition tp : tps) {
                end.add(consumer.position(tp, API_TIMEOUT));
            }
            summary.put("consumer_beginning", beginning);
            summary.put("consumer_end", end);
            for (int p = 0; p < PARTITIONS; p++) {
                check(beginning.get(p) == 0, "consumer seekToBeginning p" + p + " position " + beginning.get(p));
                check(end.get(p) == expected.get(p).size(),
                        "consumer seekToEnd p" + p + " position " + end.get(p) + ", expected " + expected.get(p).size());
            }

            // Spark's fetch: seek to the offset wanted, then poll.
            step("consume(all)");
            for (TopicPartition tp : tps) {
                consumer.seek(tp, 0);
            }
            int[] seen = new int[PARTITIONS];
            int consumed = 0;
            int polls = 0;
            long deadline = System.nanoTime() + API_TIMEOUT.toNanos();
            while (consumed < total && System.nanoTime() < deadline && errorCount < MAX_ERRORS) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(1000));
                polls++;
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    int p = record.partition();
                    List<Expected> log = expected.get(p);
                    if (seen[p] >= log.size()) {
                        check(false, "consume: extra record p" + p + " offset " + record.offset());
                    } else {
                        log.get(seen[p]).verify(record, this, "consume");
                    }
                    seen[p]++;
                    consumed++;
                }
            }
            summary.put("consumed", consumed);
            summary.put("polls", polls);
            check(consumed == total, "consume: read " + consumed + " of " + total + " records");
            ConsumerRecords<byte[], byte[]> after = consumer.poll(Duration.ofMillis(300));
            check(after.isEmpty(), "consume: " + after.count() + " records after the end");
            List<Long> positions = new ArrayList<>();
            for (TopicPartition tp : tps) {
                positions.add(consumer.position(tp, API_TIMEOUT));
            }
            summary.put("consumer_positions", positions);

            // Seek into the middle of a batch: the first record returned must be the one asked for.
            step("consume(seek middle)");
            List<Object> middles = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                List<Expected> log = expected.get(p);
                if (log.isEmpty()) {
                    continue;
                }
                Expected want = log.get(log.size() / 2 + 1 < log.size() ? log.size() / 2 + 1 : 0);
                TopicPartition tp = tps.get(p);
                consumer.assign(List.of(tp));
                consumer.seek(tp, want.offset);
                ConsumerRecord<byte[], byte[]> first = null;
                long until = System.nanoTime() + API_TIMEOUT.toNanos();
                while (first == null && System.nanoTime() < until) {
                    List<ConsumerRecord<byte[], byte[]>> got = consumer.poll(Duration.ofMillis(1000)).records(tp);
                    if (!got.isEmpty()) {
                        first = got.get(0);
                    }
                }
                if (first == null) {
                    check(false, "seek p" + p + " offset " + want.offset + ": nothing polled");
                } else {
                    middles.add(first.offset());
                    want.verify(first, this, "seek p" + p + " offset " + want.offset);
                }
            }
            summary.put("seek_middle", middles);
        }
    }

    // ---------------------------------------------------------------- helpers

    void step(String name) {
        long now = System.nanoTime();
        stepMillis.merge(step, (now - stepStart) / 1_000_000, (a, b) -> (Long) a + (Long) b);
        step = name;
        stepStart = now;
        summary.put("step", name);
    }

    void check(boolean condition, String message) {
        if (!condition) {
            errorCount++;
            if (errors.size() < MAX_ERRORS) {
                errors.add(message);
            }
        }
    }

    /** One produced record, as the consumer must see it. */
    static final class Expected {
        final String codec;
        final int index;
        final int partition;
        final long offset;
        final long timestamp;
        final byte[] key;
        final byte[] value;
        final List<Header> headers;

        private Expected(String codec, int index, int partition, long offset, long timestamp, byte[] key,
                byte[] value, List<Header> headers) {
            this.codec = codec;
            this.index = index;
            this.partition = partition;
            this.offset = offset;
            this.timestamp = timestamp;
            this.key = key;
            this.value = value;
            this.headers = headers;
        }

        /** Deterministic content: values of varying size, a tombstone now and then, several headers. */
        static Expected make(String codec, int index, int partition, long offset, long timestamp) {
            byte[] key = ("key-" + codec + "-" + index).getBytes(StandardCharsets.UTF_8);
            byte[] value = null;
            if (index % 101 != 100) {
                value = ("value-" + codec + "-" + index + "-" + "abcdefghij".repeat(index % 23))
                        .getBytes(StandardCharsets.UTF_8);
            }
            List<Header> headers = new ArrayList<>();
            headers.add(new RecordHeader("codec", codec.getBytes(StandardCharsets.UTF_8)));
            headers.add(new RecordHeader("index", ByteBuffer.allocate(4).putInt(index).array()));
            if (index % 7 == 0) {
                headers.add(new RecordHeader("null-value", null));
                headers.add(new RecordHeader("empty", new byte[0]));
            }
            if (index % 11 == 0) {
                headers.add(new RecordHeader("ключ-ü", "значение".getBytes(StandardCharsets.UTF_8)));
                headers.add(new RecordHeader("codec", "repeated key".getBytes(StandardCharsets.UTF_8)));
            }
            return new Expected(codec, index, partition, offset, timestamp, key, value, headers);
        }

        void verify(ConsumerRecord<byte[], byte[]> record, KgroupdCheck check, String where) {
            String id = where + ": " + codec + " #" + index + " (p" + partition + " offset " + offset + ")";
            if (record.partition() != partition || record.offset() != offset) {
                check.check(false, id + " read at p" + record.partition() + " offset " + record.offset());
                return;
            }
            check.check(record.timestamp() == timestamp && record.timestampType() == TimestampType.CREATE_TIME,
                    id + " timestamp " + record.timestamp() + " " + record.timestampType() + ", expected "
                            + timestamp + " CreateTime");
            check.check(Arrays.equals(record.key(), key), id + " key " + show(record.key()));
            check.check(Arrays.equals(record.value(), value), id + " value " + show(record.value()));
            Header[] got = record.headers().toArray();
            boolean same = got.length == headers.size();
            for (int h = 0; same && h < got.length; h++) {
                same = got[h].key().equals(headers.get(h).key())
                        && Arrays.equals(got[h].value(), headers.get(h).value());
            }
            if (!same) {
                StringBuilder shown = new StringBuilder();
                for (Header header : got) {
                    shown.append(header.key()).append('=').append(show(header.value())).append(' ');
                }
                check.check(false, id + " headers " + shown);
            }
        }

        static String show(byte[] bytes) {
            return bytes == null ? "null" : "\"" + new String(bytes, StandardCharsets.UTF_8) + "\"";
        }
    }

    /** Just enough JSON for the summary line. */
    static final class Json {
        static String write(Object value) {
            StringBuilder out = new StringBuilder();
            write(value, out);
            return out.toString();
        }

        static void write(Object value, StringBuilder out) {
            if (value == null) {
                out.append("null");
            } else if (value instanceof Number || value instanceof Boolean) {
                out.append(value);
            } else if (value instanceof Map<?, ?> map) {
                out.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> entry : map.entrySet()) {
                    if (!first) {
                        out.append(',');
                    }
                    first = false;
                    string(String.valueOf(entry.getKey()), out);
                    out.append(':');
                    write(entry.getValue(), out);
                }
                out.append('}');
            } else if (value instanceof Collection<?> items) {
                out.append('[');
                boolean first = true;
                for (Object item : items) {
                    if (!first) {
                        out.append(',');
                    }
                    first = false;
                    write(item, out);
                }
                out.append(']');
            } else {
                string(value.toString(), out);
            }
        }

        static void string(String s, StringBuilder out) {
            out.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> out.append("\\\"");
                    case '\\' -> out.append("\\\\");
                    case '\n' -> out.append("\\n");
                    case '\r' -> out.append("\\r");
                    case '\t' -> out.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            out.append(String.format("\\u%04x", (int) c));
                        } else {
                            out.append(c);
                        }
                    }
                }
            }
            out.append('"');
        }
    }
}
