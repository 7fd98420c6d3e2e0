"""The KRaft quorum as a single-node Kafka 4.3 (broker and controller in one process) describes
it: DescribeQuorum v0-v2, UpdateFeatures v0-v2, UnregisterBroker v0, AddRaftVoter v0-v1 and
RemoveRaftVoter v0.

DescribeQuorum answers for ``__cluster_metadata`` partition 0, as Kafka's KafkaRaftClient
does: a quorum of one voter, this node, the leader at epoch 1, with a static voter set (no
directory id, as with kraft.version 0, which kgroupd does not advertise either). kgroupd keeps
no metadata log: its high watermark and end offset are 0, and the voter has no controller
listener to name (v2's ``nodes`` lists it with none). Any other topic or partition, or more
than one, is UNKNOWN_TOPIC_OR_PARTITION on each partition asked for.

UpdateFeatures validates each update as Kafka's FeatureControlManager does, against the
features kgroupd reports in ApiVersions (``handlers.api_versions``): their supported ranges
are the local controller's, their finalized levels the current ones; any other feature is one
the controller does not support (it may only be "set" to 0, where Kafka knows its name). The
first error fails the whole request (Kafka 4's all-or-nothing answer, in the top-level
error); success answers v0-v1 with a result per feature. kgroupd fixes the finalized levels
at start-up (``--transaction-version``; group.version is 1): a valid update that would change
a level is INVALID_UPDATE_VERSION unless ``validate_only``.

UnregisterBroker of this broker succeeds (a Kafka broker unregistered while it runs registers
again; nothing changes here); any other id is BROKER_ID_NOT_REGISTERED. AddRaftVoter and
RemoveRaftVoter check what Kafka's KafkaRaftClient checks (the cluster id if given:
INCONSISTENT_CLUSTER_ID; a voter with a directory id: INVALID_REQUEST; for Add, an endpoint
for the default controller listener, CONTROLLER), then are UNSUPPORTED_VERSION: a static
quorum (kraft.version 0) cannot be reconfigured.
"""

from __future__ import annotations

from kgroupd.broker.handlers.api_versions import features
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.log.partition import now_ms
from kgroupd.protocol.codec import ZERO_UUID
from kgroupd.protocol.errors import ErrorCode

METADATA_TOPIC = "__cluster_metadata"
CONTROLLER_LISTENER = "CONTROLLER"  # Kafka's default controller.listener.names
LEADER_EPOCH = 1
UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."
# FeatureUpdate.UpgradeType codes
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
# Kafka 4.3's feature names (server-common Features) but metadata.version: setting one to
# 0 when it is not finalized is a no-op Kafka accepts; any other name is "not found".
KAFKA_FEATURES = frozenset(
    {
        "kraft.version",
        "transaction.version",
        "group.version",
        "eligible.leader.replicas.version",
        "share.version",
        "streams.version",
    }
)


@handler(55)
def handle_describe_quorum(ctx: RequestContext, req: Fields) -> Fields:
    topics = req["topics"]
    valid = (
        len(topics) == 1
        and topics[0]["topic_name"] == METADATA_TOPIC
        and len(topics[0]["partitions"]) == 1
        and topics[0]["partitions"][0]["partition_index"] == 0
    )
    if not valid:
        return {
            "error_code": 0,
            "error_message": None,
            "topics": [
                {
                    "topic_name": t["topic_name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                            "error_message": UNKNOWN_PARTITION_MESSAGE,
                        }
                        for p in t["partitions"]
                    ],
                }
                for t in topics
            ],
        }
    node = ctx.broker.node_id
    now = now_ms()
    voter = {
        "replica_id": node,
        "replica_directory_id": ZERO_UUID,
        "log_end_offset": 0,
        "last_fetch_timestamp": now,  # the leader's own: now, as Kafka reports it
        "last_caught_up_timestamp": now,
    }
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "leader_id": node,
        "leader_epoch": LEADER_EPOCH,
        "high_watermark": 0,
        "current_voters": [voter],
        "observers": [],
    }
    return {
        "error_code": 0,
        "error_message": None,
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
        "nodes": [{"node_id": node, "listeners": []}],
    }


@handler(57)
def handle_update_features(ctx: RequestContext, req: Fields) -> Fields:
    supported = {name: (lo, hi) for name, lo, hi in features()}
    finalized = {name: hi for name, (lo, hi) in supported.items()}
    if "transaction.version" in finalized:
        finalized["transaction.version"] = ctx.broker.config.transaction_version
    updates = req["feature_updates"]
    for update in updates:
        message = _refusal(
            ctx,
            update["feature"],
            update["max_version_level"],
            # v0's allow_downgrade is not read: Kafka 4's controller takes upgrade_type, whose
            # default (UPGRADE) v0 requests carry
            update["upgrade_type"],
            supported,
            finalized,
            req["validate_only"],
        )
        if message is not None:
            ctx.log.info("feature_update_refused", feature=update["feature"], reason=message)
            return {
                "error_code": int(ErrorCode.INVALID_UPDATE_VERSION),
                "error_message": "The update failed for all features since the following "
                f"feature had an error: {message}",
                "results": [],
            }
    return {
        "error_code": 0,
        "error_message": None,
        "results": [
            {"feature": u["feature"], "error_code": 0, "error_message": "NONE"} for u in updates
        ],
    }


def _refusal(
    ctx: RequestContext,
    name: str,
    level: int,
    upgrade_type: int,
    supported: dict[str, tuple[int, int]],
    finalized: dict[str, int],
    validate_only: bool,
) -> str | None:
    """Why Kafka's FeatureControlManager.updateFeature refuses one update, or None."""

    def invalid(reason: str) -> str:
        return f"Invalid update version {level} for feature {name}. {reason}"

    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return invalid("The controller does not support the given upgrade type.")
    current = finalized.get(name, 0)
    if level < 0:
        return invalid("A feature version cannot be less than 0.")
    lo, hi = supported.get(name, (0, 0))
    if not lo <= level <= hi:
        where = f"Local controller {ctx.broker.node_id}"
        if hi == 0:
            return invalid(f"{where} does not support this feature.")
        return invalid(f"{where} only supports versions {lo}-{hi}")
    if level < current and upgrade_type == UPGRADE:
        return invalid(
            "Can't downgrade the version of this feature without setting the upgrade type "
            "to either safe or unsafe downgrade."
        )
    if level > current and upgrade_type != UPGRADE:
        return invalid("Can't downgrade to a newer version.")
    if name not in supported and name not in KAFKA_FEATURES:
        return invalid(f"Feature {name} not found.")
    if level != current and not validate_only:
        return invalid(
            "kgroupd sets finalized feature levels at start-up and cannot change them while "
            "it runs (transaction.version: restart with --transaction-version)."
        )
    return None


@handler(64)
def handle_unregister_broker(ctx: RequestContext, req: Fields) -> Fields:
    broker_id = req["broker_id"]
    if broker_id != ctx.broker.node_id:
        ctx.log.info("unregister_broker_refused", broker_id=broker_id)
        return {"error_code": int(ErrorCode.BROKER_ID_NOT_REGISTERED), "error_message": None}
    ctx.log.info("unregister_broker_self", broker_id=broker_id)
    return {"error_code": 0, "error_message": None}


@handler(80)
def handle_add_raft_voter(ctx: RequestContext, req: Fields) -> Fields:
    refused = _voter_refusal(ctx, req, "Add")
    if refused is None and not any(x["name"] == CONTROLLER_LISTENER for x in req["listeners"]):
        endpoints = ", ".join(
            f"ListenerName({x['name']})={x['host']}/<unresolved>:{x['port']}"
            for x in req["listeners"]
        )
        refused = (
            ErrorCode.INVALID_REQUEST,
            f"Add voter request didn't include the endpoint (Endpoints(endpoints={{{endpoints}}}))"
            f" for the default listener ListenerName({CONTROLLER_LISTENER})",
        )
    return _voter_answer(ctx, refused or _static_quorum("adding"))


@handler(81)
def handle_remove_raft_voter(ctx: RequestContext, req: Fields) -> Fields:
    return _voter_answer(ctx, _voter_refusal(ctx, req, "Remove") or _static_quorum("removing"))


def _static_quorum(doing: str) -> tuple[ErrorCode, str]:
    return (
        ErrorCode.UNSUPPORTED_VERSION,
        f"Cluster doesn't support {doing} voter because the kraft.version feature is 0",
    )


def _voter_refusal(ctx: RequestContext, req: Fields, what: str) -> tuple[ErrorCode, str] | None:
    cluster_id = req["cluster_id"]
    if cluster_id is not None and cluster_id != ctx.broker.cluster_id:
        return (
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f'The given id "{cluster_id}" doesn\'t match the cluster id "{ctx.broker.cluster_id}"',
        )
    if req["voter_directory_id"] == ZERO_UUID:
        return ErrorCode.INVALID_REQUEST, f"{what} voter request didn't include a valid voter"
    return None


def _voter_answer(ctx: RequestContext, refused: tuple[ErrorCode, str]) -> Fields:
    error, message = refused
    ctx.log.info("raft_voter_change_refused", api_key=ctx.api_key, error=error.name)
    return {"error_code": int(error), "error_message": message}
