import java.io.PrintWriter;
import java.io.StringWriter;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ClassicGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * kgroupd's Java consumer-group check (kafka-clients 4.3, {@code group.protocol=classic}). Usage:
 *
 * <pre>
 *   KgroupdGroupCheck BOOTSTRAP TOPIC GROUP EXPIRY_SESSION_TIMEOUT_MS
 * </pre>
 *
 * <ol>
 *   <li>The Admin client creates TOPIC with 4 partitions; a producer writes a different number of
 *       records to each partition (value {@code p<partition>-<offset>}).
 *   <li>Two consumers of GROUP, each on its own thread, {@code subscribe} to TOPIC: "dynamic" and
 *       "static" (with {@code group.instance.id}, so JoinGroup v5, SyncGroup v3, Heartbeat v3,
 *       OffsetCommit v7). Both consume and {@code commitSync} after every poll (and in
 *       {@code onPartitionsRevoked}); the commit metadata names the committer. Once every record
 *       is committed and both members hold disjoint assignments of one generation covering the
 *       4 partitions, and each has sent a heartbeat, the Admin client describes the group (describeConsumerGroups,
 *       describeClassicGroups), lists it (listGroups, listConsumerGroups) and its offsets
 *       (listConsumerGroupOffsets), while both consumers keep polling.
 *   <li>The dynamic consumer closes (LeaveGroup): the static one takes all 4 partitions and
 *       resumes from the commits, reading nothing again. Describe.
 *   <li>The static consumer closes: the Java client sends no LeaveGroup for a static member, so
 *       the group keeps it (Stable, one member). Describe. {@code
 *       Admin.removeMembersFromConsumerGroup} removes it by instance id (LeaveGroup v3): Empty,
 *       no members, the offsets kept. Removing it again fails (UnknownMemberIdException).
 *   <li>More records are produced; a new static member ("expiry", with session.timeout.ms
 *       EXPIRY_SESSION_TIMEOUT_MS) joins the Empty group, resumes exactly at the committed
 *       offsets, commits and closes without leaving. Describe shows it until its session times
 *       out; then the group is Empty again.
 * </ol>
 *
 * <p>The last stdout line is {@code KGROUPD_GROUP_CHECK <json>}: {@code ok}, the {@code step}
 * reached, what was observed and the first {@code errors}. Exit code 0 when ok, 1 when a check
 * failed, 2 when a client call threw (the exception is in the summary), 64 on bad usage. The JSON
 * writer is {@code KgroupdCheck.Json} (every source in tests/java is compiled together).
 */
public final class KgroupdGroupCheck {
    static final int PARTITIONS = 4;
    /** Records produced to each partition before the group starts (different on purpose). */
    static final int[] FIRST_BATCH = {40, 70, 110, 130};
    /** Records produced to each partition before the expiry member joins. */
    static final int SECOND_BATCH = 5;
    static final String STATIC_INSTANCE = "kgroupd-static-1";
    static final String EXPIRY_INSTANCE = "kgroupd-static-2";
    static final int SESSION_TIMEOUT_MS = 6000;
    static final int HEARTBEAT_INTERVAL_MS = 500;
    static final Duration API_TIMEOUT = Duration.ofSeconds(10);
    static final Duration WAIT = Duration.ofSeconds(20);
    static final int MAX_ERRORS = 30;

    final String bootstrap;
    final String topic;
    final String group;
    final int expirySessionMs;
    final List<TopicPartition> tps = new ArrayList<>();
    final Map<String, Object> summary = new LinkedHashMap<>();
    final Map<String, Object> stepMillis = new LinkedHashMap<>();
    final List<String> errors = new ArrayList<>();
    int errorCount;
    String step = "start";
    long stepStart = System.nanoTime();

    // Shared by the consumer threads.
    final Map<Integer, Long> lastConsumed = new ConcurrentHashMap<>();
    final Map<Integer, String> lastConsumedBy = new ConcurrentHashMap<>();
    final Map<Integer, Long> committed = new ConcurrentHashMap<>();
    final Set<String> seen = ConcurrentHashMap.newKeySet();
    final AtomicInteger duplicates = new AtomicInteger();
    final List<String> threadErrors = new ArrayList<>();

    KgroupdGroupCheck(String bootstrap, String topic, String group, int expirySessionMs) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.group = group;
        this.expirySessionMs = expirySessionMs;
        for (int p = 0; p < PARTITIONS; p++) {
            tps.add(new TopicPartition(topic, p));
        }
    }

    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: KgroupdGroupCheck BOOTSTRAP TOPIC GROUP EXPIRY_SESSION_TIMEOUT_MS");
            System.exit(64);
        }
        KgroupdGroupCheck check =
                new KgroupdGroupCheck(args[0], args[1], args[2], Integer.parseInt(args[3]));
        int code;
        try {
            check.run();
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
        check.summary.put("step", code == 2 ? reached : "done");
        check.summary.put("ok", code == 0);
        check.summary.put("error_count", check.errorCount);
        check.summary.put("errors", check.errors);
        check.summary.put("step_ms", check.stepMillis);
        System.out.println("KGROUPD_GROUP_CHECK " + KgroupdCheck.Json.write(check.summary));
        System.out.flush();
        System.exit(code);
    }

    // ---------------------------------------------------------------- the scenario

    void run() throws Exception {
        summary.put("topic", topic);
        summary.put("group", group);
        int[] produced = new int[PARTITIONS];
        try (Admin admin = Admin.create(adminConfig())) {
            step("createTopic");
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();

            step("produce");
            produce(produced, FIRST_BATCH);
            summary.put("produced", list(produced));

            // ---- two members, one static, consume and commit everything
            step("group(start)");
            Member dynamic = new Member("dynamic", null, SESSION_TIMEOUT_MS);
            Member fixed = new Member("static", STATIC_INSTANCE, SESSION_TIMEOUT_MS);
            dynamic.start();
            fixed.start();
            step("group(consume)");
            await("both members own disjoint partitions of one generation and all is committed",
                    () -> allCommitted(produced) && settled(List.of(dynamic, fixed)), dynamic, fixed);
            summary.put("generation", fixed.generation);
            summary.put("members", Map.of(
                    "dynamic", dynamic.view(), "static", fixed.view()));
            summary.put("last_consumed", lastConsumedList());
            summary.put("last_consumed_by", lastConsumedByList());

            step("describe(stable)");
            Map<String, Object> stable = describe(admin);
            summary.put("stable", stable);
            summary.put("stable_classic", describeClassic(admin));
            checkMembers(stable, List.of(dynamic, fixed));
            step("listGroups");
            summary.put("list_groups", listGroups(admin));
            summary.put("list_consumer_groups", listConsumerGroups(admin));
            step("listConsumerGroupOffsets(stable)");
            Map<String, Object> offsets = groupOffsets(admin);
            summary.put("offsets", offsets.get("offsets"));
            summary.put("offset_metadata", offsets.get("metadata"));

            // ---- the dynamic member leaves; the static one takes over
            step("close(dynamic)");
            int genBefore = fixed.generation;
            int readBefore = fixed.records.get();
            summary.put("dynamic_close_ms", dynamic.stopAndJoin());
            step("takeover");
            await("the static member owns all partitions in a new generation",
                    () -> fixed.generation > genBefore && fixed.assignment.size() == PARTITIONS, fixed);
            // A few more polls: it resumes at the commits, which are at the end: nothing comes.
            fixed.pollsAfter(fixed.polls.get() + 5);
            await("the static member polled a few times after taking over",
                    () -> fixed.polls.get() >= fixed.pollsTarget, fixed);
            summary.put("takeover_generation", fixed.generation);
            summary.put("takeover_reread", fixed.records.get() - readBefore);
            step("describe(takeover)");
            Map<String, Object> takeover = describe(admin);
            summary.put("takeover", takeover);
            checkMembers(takeover, List.of(fixed));

            // ---- the static member closes: it stays in the group until removed
            step("close(static)");
            summary.put("static_close_ms", fixed.stopAndJoin());
            step("describe(static closed)");
            summary.put("static_closed", describe(admin));

            step("removeMembersFromConsumerGroup");
            admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                    List.of(new MemberToRemove(STATIC_INSTANCE)))).all().get();
            summary.put("removed", describe(admin));
            step("removeMembersFromConsumerGroup(again)");
            try {
                admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(
                        List.of(new MemberToRemove(STATIC_INSTANCE)))).all().get();
                summary.put("remove_again", "no error");
            } catch (ExecutionException e) {
                summary.put("remove_again", e.getCause().getClass().getSimpleName());
            }
            step("listConsumerGroupOffsets(empty)");
            summary.put("offsets_after_remove", groupOffsets(admin).get("offsets"));
            summary.put("list_groups_after_remove", listGroups(admin));

            // ---- a static member that closes is removed when its session times out
            step("produce(more)");
            int[] more = new int[PARTITIONS];
            Arrays.fill(more, SECOND_BATCH);
            int[] firstOffsets = produced.clone();
            produce(produced, more);
            summary.put("produced_total", list(produced));
            step("expiry(consume)");
            Member expiry = new Member("expiry", EXPIRY_INSTANCE, expirySessionMs);
            expiry.start();
            await("the expiry member owns every partition and committed the new records",
                    () -> allCommitted(produced) && settled(List.of(expiry)), expiry);
            summary.put("expiry_member", expiry.view());
            summary.put("expiry_first_offsets", expiry.firstOffsetList());
            summary.put("expiry_resume_expected", list(firstOffsets));
            summary.put("expiry_records", expiry.records.get());
            step("expiry(close)");
            long closedAt = System.nanoTime(); // the last heartbeat was at most one interval before
            summary.put("expiry_close_ms", expiry.stopAndJoin());
            Map<String, Object> closed = describe(admin); // still there: no LeaveGroup on close
            summary.put("expiry_closed", closed);
            step("expiry(wait)");
            Map<String, Object> after = closed;
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (!((List<?>) after.get("members")).isEmpty() && System.nanoTime() < deadline) {
                Thread.sleep(100);
                after = describe(admin);
            }
            summary.put("expired_after_ms", (System.nanoTime() - closedAt) / 1_000_000);
            summary.put("expired", after);
            summary.put("offsets_final", groupOffsets(admin).get("offsets"));
        }
        synchronized (threadErrors) {
            summary.put("thread_errors", new ArrayList<>(threadErrors));
        }
        summary.put("duplicates", duplicates.get());
        summary.put("records_seen", seen.size());
    }

    // ---------------------------------------------------------------- the consumers

    /** One group member: a KafkaConsumer owned by its own thread. */
    final class Member implements Runnable {
        final String name;
        final String instanceId;
        final int sessionTimeoutMs;
        final Thread thread;
        final AtomicInteger records = new AtomicInteger();
        final AtomicInteger polls = new AtomicInteger();
        final AtomicInteger commits = new AtomicInteger();
        final AtomicInteger commitFailures = new AtomicInteger();
        final AtomicInteger assignedCalls = new AtomicInteger();
        final AtomicInteger revokedCalls = new AtomicInteger();
        final Map<Integer, Long> firstOffsets = new ConcurrentHashMap<>();
        final Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        volatile boolean stop;
        volatile int pollsTarget;
        volatile int heartbeats;
        volatile int generation = -1;
        volatile String memberId = "";
        volatile Set<Integer> assignment = Set.of();
        volatile String failure;

        Member(String name, String instanceId, int sessionTimeoutMs) {
            this.name = name;
            this.instanceId = instanceId;
            this.sessionTimeoutMs = sessionTimeoutMs;
            this.thread = new Thread(this, "consumer-" + name);
            this.thread.setDaemon(true);
        }

        void start() {
            thread.start();
        }

        void pollsAfter(int target) {
            pollsTarget = target;
        }

        String clientId() {
            return "kgroupd-group-" + name;
        }

        /** Stop polling, close the consumer on its thread; the milliseconds it took. */
        long stopAndJoin() throws InterruptedException {
            long start = System.nanoTime();
            stop = true;
            thread.join(WAIT.toMillis());
            check(!thread.isAlive(), name + ": the consumer thread did not finish within " + WAIT);
            return (System.nanoTime() - start) / 1_000_000;
        }

        Properties config() {
            Properties props = common(clientId());
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            if (instanceId != null) {
                props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
            }
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, String.valueOf(sessionTimeoutMs));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, String.valueOf(HEARTBEAT_INTERVAL_MS));
            props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "20000");
            props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "25"); // several polls and commits
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            return props;
        }

        @Override
        public void run() {
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config())) {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                        revokedCalls.incrementAndGet();
                        Map<TopicPartition, OffsetAndMetadata> revoked = new HashMap<>();
                        for (TopicPartition tp : partitions) {
                            OffsetAndMetadata offset = pending.remove(tp);
                            if (offset != null) {
                                revoked.put(tp, offset);
                            }
                        }
                        commit(consumer, revoked);
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                        assignedCalls.incrementAndGet();
                    }
                });
                while (!stop) {
                    ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, String> record : batch) {
                        consumed(record);
                        pending.put(new TopicPartition(record.topic(), record.partition()),
                                new OffsetAndMetadata(record.offset() + 1, "by " + name));
                    }
                    if (!pending.isEmpty()) {
                        Map<TopicPartition, OffsetAndMetadata> now = new HashMap<>(pending);
                        pending.clear();
                        commit(consumer, now);
                    }
                    publish(consumer);
                    polls.incrementAndGet();
                }
            } catch (Throwable t) {
                StringWriter trace = new StringWriter();
                t.printStackTrace(new PrintWriter(trace));
                failure = name + ": " + t;
                System.err.println("consumer " + name + " threw:\n" + trace);
                threadError(failure);
            }
        }

        void commit(KafkaConsumer<String, String> consumer, Map<TopicPartition, OffsetAndMetadata> offsets) {
            if (offsets.isEmpty()) {
                return;
            }
            try {
                consumer.commitSync(offsets, API_TIMEOUT);
                commits.incrementAndGet();
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                    committed.merge(e.getKey().partition(), e.getValue().offset(), Math::max);
                }
            } catch (KafkaException e) {
                // A correct coordinator accepts every one of these: they are sent between polls
                // of a Stable member, or from onPartitionsRevoked while the group is
                // PreparingRebalance (Kafka accepts the current generation there). Recorded.
                commitFailures.incrementAndGet();
                threadError(name + ": commitSync " + offsets.keySet() + " failed: " + e);
            }
        }

        void consumed(ConsumerRecord<String, String> record) {
            int p = record.partition();
            records.incrementAndGet();
            firstOffsets.putIfAbsent(p, record.offset());
            String expected = "p" + p + "-" + record.offset();
            if (!expected.equals(record.value())) {
                threadError(name + ": p" + p + " offset " + record.offset() + " has value "
                        + record.value() + ", expected " + expected);
            }
            if (!seen.add(p + ":" + record.offset())) {
                duplicates.incrementAndGet();
            }
            lastConsumed.merge(p, record.offset(), Math::max);
            lastConsumedBy.put(p, name);
        }

        void publish(KafkaConsumer<String, String> consumer) {
            Set<Integer> parts = new TreeSet<>();
            for (TopicPartition tp : consumer.assignment()) {
                parts.add(tp.partition());
            }
            for (Map.Entry<MetricName, ? extends Metric> e : consumer.metrics().entrySet()) {
                if (e.getKey().name().equals("heartbeat-total")
                        && e.getKey().group().equals("consumer-coordinator-metrics")) {
                    heartbeats = ((Number) e.getValue().metricValue()).intValue();
                }
            }
            ConsumerGroupMetadata meta = consumer.groupMetadata();
            memberId = meta.memberId();
            assignment = Set.copyOf(parts);
            generation = meta.generationId(); // last: readers check it first
        }

        Map<String, Object> view() {
            Map<String, Object> view = new LinkedHashMap<>();
            view.put("client_id", clientId());
            view.put("instance_id", instanceId);
            view.put("member_id", memberId);
            view.put("generation", generation);
            view.put("heartbeats", heartbeats);
            view.put("partitions", new ArrayList<>(new TreeSet<>(assignment)));
            view.put("records", records.get());
            view.put("commits", commits.get());
            view.put("commit_failures", commitFailures.get());
            view.put("assigned_calls", assignedCalls.get());
            view.put("revoked_calls", revokedCalls.get());
            return view;
        }

        List<Object> firstOffsetList() {
            List<Object> out = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                out.add(firstOffsets.get(p));
            }
            return out;
        }
    }

    boolean allCommitted(int[] produced) {
        for (int p = 0; p < PARTITIONS; p++) {
            Long offset = committed.get(p);
            if (offset == null || offset != produced[p]) {
                return false;
            }
        }
        return true;
    }

    /**
     * The members hold disjoint assignments of one generation that cover every partition, and each
     * has sent a heartbeat (Heartbeat v3 with the instance id is part of the check).
     */
    static boolean settled(List<Member> members) {
        int generation = members.get(0).generation;
        Set<Integer> union = new TreeSet<>();
        int total = 0;
        for (Member m : members) {
            if (m.generation != generation || m.generation < 1 || m.assignment.isEmpty()
                    || m.heartbeats < 1) {
                return false;
            }
            union.addAll(m.assignment);
            total += m.assignment.size();
        }
        return union.size() == PARTITIONS && total == PARTITIONS;
    }

    void await(String what, BooleanSupplier condition, Member... members) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!condition.getAsBoolean()) {
            for (Member m : members) {
                if (m.failure != null) {
                    throw new IllegalStateException("waiting until " + what + ": " + m.failure);
                }
            }
            if (System.nanoTime() > deadline) {
                List<Object> views = new ArrayList<>();
                for (Member m : members) {
                    views.add(m.view());
                }
                throw new IllegalStateException("timed out after " + WAIT + " waiting until " + what
                        + "; committed " + new TreeMap<>(committed) + "; members " + views);
            }
            Thread.sleep(20);
        }
    }

    // ---------------------------------------------------------------- admin views

    Map<String, Object> describe(Admin admin) throws Exception {
        ConsumerGroupDescription d =
                admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("group_id", d.groupId());
        out.put("state", String.valueOf(d.groupState()));
        out.put("type", String.valueOf(d.type()));
        out.put("assignor", d.partitionAssignor());
        out.put("simple", d.isSimpleConsumerGroup());
        out.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
        out.put("members", members(d.members()));
        return out;
    }

    Map<String, Object> describeClassic(Admin admin) throws Exception {
        ClassicGroupDescription d =
                admin.describeClassicGroups(List.of(group)).describedGroups().get(group).get();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("state", String.valueOf(d.state()));
        out.put("protocol", d.protocol());
        out.put("protocol_data", d.protocolData());
        out.put("simple", d.isSimpleConsumerGroup());
        out.put("members", members(d.members()));
        return out;
    }

    List<Object> members(Collection<MemberDescription> members) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (MemberDescription m : members) {
            Map<String, Object> member = new LinkedHashMap<>();
            member.put("client_id", m.clientId());
            member.put("instance_id", m.groupInstanceId().orElse(null));
            member.put("member_id", m.consumerId());
            member.put("host", m.host());
            Set<Integer> parts = new TreeSet<>();
            for (TopicPartition tp : m.assignment().topicPartitions()) {
                check(tp.topic().equals(topic), "member " + m.clientId() + " assigned " + tp);
                parts.add(tp.partition());
            }
            member.put("partitions", new ArrayList<>(parts));
            out.add(member);
        }
        out.sort((a, b) -> String.valueOf(a.get("client_id")).compareTo(String.valueOf(b.get("client_id"))));
        return new ArrayList<>(out);
    }

    /** describeConsumerGroups agrees with what each consumer itself reports. */
    void checkMembers(Map<String, Object> description, List<Member> expected) {
        List<?> described = (List<?>) description.get("members");
        check(described.size() == expected.size(),
                "describe shows " + described.size() + " members, expected " + expected.size());
        for (Member m : expected) {
            Map<?, ?> found = null;
            for (Object o : described) {
                Map<?, ?> d = (Map<?, ?>) o;
                if (m.clientId().equals(d.get("client_id"))) {
                    found = d;
                }
            }
            if (found == null) {
                check(false, "describe does not show " + m.clientId());
                continue;
            }
            check(m.memberId.equals(found.get("member_id")),
                    m.name + ": member id " + found.get("member_id") + " in describe, " + m.memberId
                            + " in the consumer");
            check(new ArrayList<>(new TreeSet<>(m.assignment)).equals(found.get("partitions")),
                    m.name + ": partitions " + found.get("partitions") + " in describe, " + m.assignment
                            + " in the consumer");
        }
    }

    Map<String, Object> listGroups(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        for (GroupListing g : admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get()) {
            if (g.groupId().equals(group)) {
                out.put("type", g.type().map(String::valueOf).orElse(null));
                out.put("protocol", g.protocol());
                out.put("state", g.groupState().map(String::valueOf).orElse(null));
                out.put("simple", g.isSimpleConsumerGroup());
            }
        }
        return out;
    }

    @SuppressWarnings("removal") // the issue names listConsumerGroups (deprecated for listGroups)
    Map<String, Object> listConsumerGroups(Admin admin) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        for (ConsumerGroupListing g : admin.listConsumerGroups().all().get()) {
            if (g.groupId().equals(group)) {
                out.put("state", g.groupState().map(String::valueOf).orElse(null));
                out.put("type", g.type().map(String::valueOf).orElse(null));
                out.put("simple", g.isSimpleConsumerGroup());
            }
        }
        return out;
    }

    Map<String, Object> groupOffsets(Admin admin) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        List<Object> offsets = new ArrayList<>();
        List<Object> metadata = new ArrayList<>();
        for (TopicPartition tp : tps) {
            OffsetAndMetadata o = got.get(tp);
            offsets.add(o == null ? null : o.offset());
            metadata.add(o == null ? null : o.metadata());
        }
        check(got.size() == PARTITIONS || got.isEmpty(),
                "listConsumerGroupOffsets returned " + got.keySet());
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("offsets", offsets);
        out.put("metadata", metadata);
        return out;
    }

    // ---------------------------------------------------------------- produce

    void produce(int[] produced, int[] counts) throws Exception {
        Properties props = common("kgroupd-group-producer");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "10000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "10000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> futures = new ArrayList<>();
            List<String> values = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) {
                for (int i = 0; i < counts[p]; i++) {
                    String value = "p" + p + "-" + (produced[p] + i);
                    values.add(value);
                    futures.add(producer.send(new ProducerRecord<>(topic, p, "k" + i, value)));
                }
            }
            producer.flush();
            for (int i = 0; i < futures.size(); i++) {
                RecordMetadata m = futures.get(i).get();
                check(values.get(i).equals("p" + m.partition() + "-" + m.offset()),
                        "produce: " + values.get(i) + " acknowledged at p" + m.partition() + " offset " + m.offset());
            }
        }
        for (int p = 0; p < PARTITIONS; p++) {
            produced[p] += counts[p];
        }
    }

    // ---------------------------------------------------------------- helpers

    Properties adminConfig() {
        Properties props = common("kgroupd-group-admin");
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

    List<Object> lastConsumedList() {
        List<Object> out = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            out.add(lastConsumed.get(p));
        }
        return out;
    }

    List<Object> lastConsumedByList() {
        List<Object> out = new ArrayList<>();
        for (int p = 0; p < PARTITIONS; p++) {
            out.add(Optional.ofNullable(lastConsumedBy.get(p)).map(n -> "by " + n).orElse(null));
        }
        return out;
    }

    static List<Object> list(int[] values) {
        List<Object> out = new ArrayList<>();
        for (int v : values) {
            out.add(v);
        }
        return out;
    }

    void threadError(String message) {
        synchronized (threadErrors) {
            threadErrors.add(message);
        }
        check(false, message);
    }

    void step(String name) {
        long now = System.nanoTime();
        stepMillis.merge(step, (now - stepStart) / 1_000_000, (a, b) -> (Long) a + (Long) b);
        step = name;
        stepStart = now;
        summary.put("step", name);
    }

    synchronized void check(boolean condition, String message) {
        if (!condition) {
            errorCount++;
            if (errors.size() < MAX_ERRORS) {
                errors.add(message);
            }
        }
    }
}
