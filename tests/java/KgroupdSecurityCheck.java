import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kafka-clients 4.3 over kgroupd's TLS and SASL listeners, every case in one JVM. Usage:
 *
 * <pre>
 *   KgroupdSecurityCheck SASL_SSL_BOOTSTRAP SSL_BOOTSTRAP CA_PEM USER PASSWORD CLIENT_PEM ROGUE_PEM
 * </pre>
 *
 * <p>SASL_SSL with SCRAM-SHA-512: the Admin client creates a topic, a producer sends 300 records,
 * a consumer in a group reads them all and commits, the Admin reads the group's offsets back.
 * The Admin then adds user "carol" (SCRAM-SHA-256) with AlterUserScramCredentials, describes
 * the users, and carol produces with SCRAM-SHA-256. A wrong password must fail with
 * SaslAuthenticationException; on the SSL listener a client certificate signed by the CA
 * (CLIENT_PEM: key and certificate, PEM) produces, and one from another CA (ROGUE_PEM) must
 * fail with SslAuthenticationException. Prints {@code KGROUPD_SECURITY <json>}; exit 0 when ok.
 */
public final class KgroupdSecurityCheck {
    static final int RECORDS = 300;
    static final Duration TIMEOUT = Duration.ofSeconds(15);

    final Map<String, Object> summary = new LinkedHashMap<>();
    final String saslSsl;
    final String ssl;
    final String ca;

    KgroupdSecurityCheck(String saslSsl, String ssl, String ca) {
        this.saslSsl = saslSsl;
        this.ssl = ssl;
        this.ca = ca;
    }

    Properties scram(String mechanism, String user, String password) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, saslSsl);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, ca);
        p.put(SaslConfigs.SASL_MECHANISM, mechanism);
        p.put(
                SaslConfigs.SASL_JAAS_CONFIG,
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                        + user
                        + "\" password=\""
                        + password
                        + "\";");
        return p;
    }

    Properties mutualTls(String keystore) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, ssl);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SSL");
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, ca);
        p.put(SslConfigs.SSL_KEYSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG, keystore);
        return p;
    }

    static KafkaProducer<String, String> producer(Properties base) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        p.put(ProducerConfig.RETRIES_CONFIG, "0");
        return new KafkaProducer<>(p);
    }

    /** The simple name of the exception that failing `action` raised, or "none". */
    static String failure(ThrowingRunnable action) {
        try {
            action.run();
            return "none";
        } catch (Exception e) {
            Throwable t = e;
            while (t.getCause() != null && !t.getClass().getSimpleName().endsWith("AuthenticationException")) {
                t = t.getCause();
            }
            return t.getClass().getSimpleName();
        }
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    void run(String user, String password, String clientPem, String roguePem) throws Exception {
        String topic = "secure-events";
        String group = "secure-group";
        try (Admin admin = Admin.create(scram("SCRAM-SHA-512", user, password))) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
        }
        try (KafkaProducer<String, String> p = producer(scram("SCRAM-SHA-512", user, password))) {
            for (int i = 0; i < RECORDS; i++) {
                p.send(new ProducerRecord<>(topic, "k" + i, "v" + i));
            }
            p.flush();
        }
        Properties c = scram("SCRAM-SHA-512", user, password);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        int consumed = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + TIMEOUT.toNanos();
            while (consumed < RECORDS && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    consumed++;
                }
            }
            consumer.commitSync();
        }
        summary.put("consumed", consumed);
        long committed = 0;
        try (Admin admin = Admin.create(scram("SCRAM-SHA-512", user, password))) {
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (OffsetAndMetadata o : offsets.values()) {
                committed += o.offset();
            }
            admin.alterUserScramCredentials(
                            List.of(
                                    new UserScramCredentialUpsertion(
                                            "carol",
                                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            "carol-secret")))
                    .all()
                    .get();
            Map<String, UserScramCredentialsDescription> users =
                    admin.describeUserScramCredentials().all().get();
            List<String> names = new ArrayList<>(users.keySet());
            Collections.sort(names);
            summary.put("users", names);
            summary.put(
                    "carol_iterations",
                    users.get("carol").credentialInfos().get(0).iterations());
        }
        summary.put("committed", committed);
        try (KafkaProducer<String, String> p = producer(scram("SCRAM-SHA-256", "carol", "carol-secret"))) {
            p.send(new ProducerRecord<>(topic, "carol", "hello")).get();
            summary.put("carol_produced", true);
        }
        summary.put(
                "wrong_password",
                failure(() -> {
                    try (KafkaProducer<String, String> p =
                            producer(scram("SCRAM-SHA-512", user, password + "x"))) {
                        p.partitionsFor(topic);
                    }
                }));
        try (KafkaProducer<String, String> p = producer(mutualTls(clientPem))) {
            p.send(new ProducerRecord<>(topic, "mtls", "hello")).get();
            summary.put("mtls_produced", true);
        }
        summary.put(
                "untrusted_certificate",
                failure(() -> {
                    try (KafkaProducer<String, String> p = producer(mutualTls(roguePem))) {
                        p.partitionsFor(topic);
                    }
                }));
    }

    static String json(Object o) {
        if (o instanceof String s) {
            return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
        }
        if (o instanceof List<?> l) {
            List<String> parts = new ArrayList<>();
            for (Object x : l) {
                parts.add(json(x));
            }
            return "[" + String.join(",", parts) + "]";
        }
        return String.valueOf(o);
    }

    public static void main(String[] args) {
        if (args.length != 7) {
            System.err.println("usage: KgroupdSecurityCheck SASL_SSL SSL CA USER PASSWORD CLIENT_PEM ROGUE_PEM");
            System.exit(64);
        }
        KgroupdSecurityCheck check = new KgroupdSecurityCheck(args[0], args[1], args[2]);
        boolean ok = true;
        try {
            check.run(args[3], args[4], args[5], args[6]);
        } catch (Exception e) {
            ok = false;
            check.summary.put("exception", e.toString());
        }
        check.summary.put("ok", ok);
        List<String> fields = new ArrayList<>();
        for (Map.Entry<String, Object> e : check.summary.entrySet()) {
            fields.add(json(e.getKey()) + ":" + json(e.getValue()));
        }
        System.out.println("KGROUPD_SECURITY {" + String.join(",", fields) + "}");
        System.exit(ok ? 0 : 1);
    }
}
