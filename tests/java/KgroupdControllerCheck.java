import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ListConfigResourcesOptions;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;

/**
 * The Java Admin 4.3's controller-side APIs against kgroupd (issue 29). Usage:
 *
 * <pre>
 *   KgroupdControllerCheck PLAINTEXT_BOOTSTRAP SASL_BOOTSTRAP
 * </pre>
 *
 * <p>SASL_BOOTSTRAP is a SASL_PLAINTEXT listener where alice/alice-secret logs in with PLAIN.
 * describeMetadataQuorum; describeFeatures; updateFeatures (validated only, and refused);
 * listConfigResources (every type, then topics only); unregisterBroker (this broker, another);
 * addRaftVoter and removeRaftVoter; the delegation token calls over both listeners. Prints {@code KGROUPD_CONTROLLER <json>}; exit 0 when every call returned.
 */
public final class KgroupdControllerCheck {
    private static String q(Object value) {
        return "\"" + String.valueOf(value).replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /** "ok", or the class name of the failure's cause. */
    private static String outcome(Future<?> future) throws InterruptedException {
        try {
            future.get();
            return "ok";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        }
    }

    private static String message(Future<?> future) throws InterruptedException {
        try {
            future.get();
            return "";
        } catch (ExecutionException e) {
            return e.getCause().getMessage();
        }
    }

    private static Admin admin(String bootstrap, boolean sasl) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        if (sasl) {
            p.put("security.protocol", "SASL_PLAINTEXT");
            p.put("sasl.mechanism", "PLAIN");
            p.put(
                "sasl.jaas.config",
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    + "username=\"alice\" password=\"alice-secret\";");
        }
        return Admin.create(p);
    }

    private static void tokens(Admin admin, String prefix, List<String> out) throws Exception {
        out.add(q(prefix + "create") + ":" + q(outcome(admin.createDelegationToken().delegationToken())));
        out.add(q(prefix + "renew") + ":" + q(outcome(admin.renewDelegationToken(new byte[] {1}).expiryTimestamp())));
        out.add(q(prefix + "expire") + ":" + q(outcome(admin.expireDelegationToken(new byte[] {1}).expiryTimestamp())));
        out.add(q(prefix + "describe") + ":" + q(outcome(admin.describeDelegationToken().delegationTokens())));
    }

    public static void main(String[] args) throws Exception {
        List<String> out = new ArrayList<>();
        try (Admin admin = admin(args[0], false)) {
            QuorumInfo quorum = admin.describeMetadataQuorum().quorumInfo().get();
            out.add(q("leader") + ":" + quorum.leaderId());
            out.add(q("leader_epoch") + ":" + quorum.leaderEpoch());
            out.add(q("high_watermark") + ":" + quorum.highWatermark());
            out.add(q("voters") + ":" + quorum.voters().size());
            out.add(q("voter") + ":" + quorum.voters().get(0).replicaId());
            out.add(q("voter_fetch") + ":" + quorum.voters().get(0).lastFetchTimestamp().isPresent());
            out.add(q("observers") + ":" + quorum.observers().size());
            out.add(q("quorum_nodes") + ":" + q(quorum.nodes().keySet()));

            FeatureMetadata features = admin.describeFeatures().featureMetadata().get();
            Map<String, Short> finalized = new TreeMap<>();
            for (Map.Entry<String, FinalizedVersionRange> e : features.finalizedFeatures().entrySet()) {
                finalized.put(e.getKey(), e.getValue().maxVersionLevel());
            }
            out.add(q("finalized") + ":" + q(finalized));
            short tv = finalized.get("transaction.version");
            out.add(q("validated") + ":" + q(outcome(admin.updateFeatures(
                Map.of("transaction.version", new FeatureUpdate((short) (tv - 1), FeatureUpdate.UpgradeType.SAFE_DOWNGRADE)),
                new UpdateFeaturesOptions().validateOnly(true)).all())));
            Future<Void> tooNew = admin.updateFeatures(
                Map.of("transaction.version", new FeatureUpdate((short) (tv + 1), FeatureUpdate.UpgradeType.UPGRADE)),
                new UpdateFeaturesOptions()).all();
            out.add(q("too_new") + ":" + q(outcome(tooNew)));
            out.add(q("too_new_message") + ":" + q(message(tooNew)));
            out.add(q("same") + ":" + q(outcome(admin.updateFeatures(
                Map.of("group.version", new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)),
                new UpdateFeaturesOptions()).all())));

            List<String> all = new ArrayList<>();
            for (ConfigResource r : admin.listConfigResources().all().get()) {
                all.add(r.type() + ":" + r.name());
            }
            out.add(q("config_resources") + ":" + q(all));
            List<String> topics = new ArrayList<>();
            for (ConfigResource r : admin.listConfigResources(
                    Set.of(ConfigResource.Type.TOPIC), new ListConfigResourcesOptions()).all().get()) {
                topics.add(r.type() + ":" + r.name());
            }
            out.add(q("topic_resources") + ":" + q(topics));

            int node = quorum.leaderId();
            out.add(q("unregister_self") + ":" + q(outcome(admin.unregisterBroker(node).all())));
            out.add(q("unregister_other") + ":" + q(outcome(admin.unregisterBroker(node + 1).all())));
            Set<RaftVoterEndpoint> endpoints = Set.of(new RaftVoterEndpoint("CONTROLLER", "localhost", 9093));
            Future<Void> add = admin.addRaftVoter(5, Uuid.randomUuid(), endpoints).all();
            out.add(q("add_voter") + ":" + q(outcome(add)));
            out.add(q("add_voter_message") + ":" + q(message(add)));
            out.add(q("remove_voter") + ":" + q(outcome(admin.removeRaftVoter(node, Uuid.randomUuid()).all())));

            tokens(admin, "plain_", out);
        }
        try (Admin admin = admin(args[1], true)) {
            tokens(admin, "sasl_", out);
        }
        System.out.println("KGROUPD_CONTROLLER {" + String.join(",", out) + "}");
    }
}
