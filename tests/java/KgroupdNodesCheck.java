import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A consumer whose group coordinator node goes down and comes back (kgroupd --nodes 3 and its
 * test controls), with kafka-clients 4.3, in one JVM: a consumer (group.protocol PROTOCOL)
 * reads and commits a first round of records; the coordinator node is taken down (POST
 * HTTP/api/test/nodes/ID/down); a second round is produced and read, and committed to the new
 * coordinator; the node comes back (.../up); a third round is read and committed; the consumer
 * closes and a new one in the same group must read nothing (the commits were kept). Prints one
 * line "KGROUPD_NODES_CHECK <json>".
 * Args: BOOTSTRAP HTTP TOPIC GROUP PROTOCOL PER_ROUND
 */
public final class KgroupdNodesCheck {
    static final HttpClient HTTP = HttpClient.newHttpClient();

    static String post(String url) throws Exception {
        HttpRequest request =
                HttpRequest.newBuilder(URI.create(url))
                        .POST(HttpRequest.BodyPublishers.noBody())
                        .build();
        HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() != 200) {
            throw new IllegalStateException(url + " answered " + response.statusCode());
        }
        return response.body();
    }

    static int coordinator(Admin admin, String group) throws Exception {
        return admin.describeConsumerGroups(List.of(group))
                .all()
                .get()
                .get(group)
                .coordinator()
                .id();
    }

    static void produce(String bootstrap, String topic, int round, int count) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, i % 3, null, round + "-" + i)).get();
            }
        }
    }

    static int read(KafkaConsumer<String, String> consumer, Set<String> seen, int want) {
        int duplicates = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        int got = 0;
        while (got < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                got++;
                if (!seen.add(r.value())) {
                    duplicates++;
                }
            }
        }
        return duplicates;
    }

    static KafkaConsumer<String, String> consumer(
            String bootstrap, String group, String protocol, String topic) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        if (protocol.equals("classic")) {
            p.put("heartbeat.interval.ms", "300");
        }
        KafkaConsumer<String, String> c = new KafkaConsumer<>(p);
        c.subscribe(List.of(topic));
        return c;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String http = args[1];
        String topic = args[2];
        String group = args[3];
        String protocol = args[4];
        int perRound = Integer.parseInt(args[5]);
        Set<String> seen = new HashSet<>();
        List<Integer> coordinators = new ArrayList<>();
        int duplicates = 0;
        int secondRead = -1;
        Map<String, Long> committed = new TreeMap<>();
        Map<String, Long> resumed = new TreeMap<>();
        String error = null;
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            KafkaConsumer<String, String> c = consumer(bootstrap, group, protocol, topic);
            produce(bootstrap, topic, 1, perRound);
            duplicates += read(c, seen, perRound);
            c.commitSync();
            int first = coordinator(admin, group);
            coordinators.add(first);
            post(http + "/api/test/nodes/" + first + "/down");
            produce(bootstrap, topic, 2, perRound);
            duplicates += read(c, seen, perRound);
            c.commitSync(Duration.ofSeconds(30));
            coordinators.add(coordinator(admin, group));
            post(http + "/api/test/nodes/" + first + "/up");
            produce(bootstrap, topic, 3, perRound);
            duplicates += read(c, seen, perRound);
            c.commitSync(Duration.ofSeconds(30));
            coordinators.add(coordinator(admin, group));
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e :
                    c.committed(c.assignment()).entrySet()) {
                committed.put(e.getKey().toString(), e.getValue().offset());
            }
            c.close();
            KafkaConsumer<String, String> again = consumer(bootstrap, group, protocol, topic);
            secondRead = 0;
            long deadline = System.currentTimeMillis() + 30_000;
            while (again.assignment().size() < 3 && System.currentTimeMillis() < deadline) {
                secondRead += again.poll(Duration.ofMillis(200)).count();
            }
            long until = System.currentTimeMillis() + 1000;  // and a little more
            while (System.currentTimeMillis() < until) {
                secondRead += again.poll(Duration.ofMillis(200)).count();
            }
            for (TopicPartition tp : again.assignment()) {
                resumed.put(tp.toString(), again.position(tp));
            }
            again.close();
        } catch (Exception e) {
            error = e.toString();
        }
        StringBuilder json = new StringBuilder("{");
        json.append("\"consumed\":").append(seen.size());
        json.append(",\"duplicates\":").append(duplicates);
        json.append(",\"coordinators\":").append(coordinators);
        json.append(",\"second_read\":").append(secondRead);
        json.append(",\"committed\":{");
        int i = 0;
        for (Map.Entry<String, Long> e : committed.entrySet()) {
            json.append(i++ == 0 ? "" : ",");
            json.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        json.append("},\"resumed\":{");
        i = 0;
        for (Map.Entry<String, Long> e : resumed.entrySet()) {
            json.append(i++ == 0 ? "" : ",");
            json.append('"').append(e.getKey()).append("\":").append(e.getValue());
        }
        json.append("},\"error\":");
        json.append(error == null ? "null" : "\"" + error.replace("\\", "/").replace("\"", "'") + "\"");
        json.append("}");
        System.out.println("KGROUPD_NODES_CHECK " + json);
        System.out.flush();
        System.exit(0);
    }
}
