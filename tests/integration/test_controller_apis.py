"""The controller-side APIs a Kafka 4.3 broker serves to clients (issue 29), answered as a
single-node Kafka 4.3 with its default config answers them: the delegation token APIs
(tokens not enabled), DescribeQuorum (a one-voter quorum), UpdateFeatures (validated against
the features ApiVersions reports), ListConfigResources (the config resources kgroupd has).

Each request here is encoded and each answer decoded with kafka-python 3's codec (its classes
built from Kafka's message JSON; the delegation token messages from kafka-clients-4.3.0.jar),
not kgroupd's own, at every version served. The Java Admin 4.3 calls them in
``test_java_controller_apis.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.schemas import SERVED
from tests.protocol.kp_extra import extra_kp_classes
from tests.protocol.kp_reference import KP_CLASSES
from tests.support.kafka_wire import WireClient, create_topic

NOT_ALLOWED, DISABLED, TOKEN_AUTH, BAD_PRINCIPAL = 64, 61, 65, 67
UNKNOWN_TOPIC, UNSUPPORTED_VERSION, INVALID_UPDATE_VERSION = 3, 35, 95
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
USERS = "alice:alice-secret\nroot:root-secret\n"
REFUSED_ALL = "The update failed for all features since the following feature had an error: "


def versions(api_key: int) -> list[int]:
    lo, hi = SERVED[api_key]
    return list(range(lo, hi + 1))


def kp_classes(api_key: int) -> tuple[Any, Any]:
    found = {**KP_CLASSES, **extra_kp_classes()}.get(api_key)
    if found is None:
        pytest.skip(f"no kafka-python class for api key {api_key} (kafka-clients jar missing)")
    return found


async def kp_request(wire: WireClient, api_key: int, version: int, **fields: Any) -> Any:
    """Send a request encoded by kafka-python; the answer decoded by kafka-python."""
    req_cls, resp_cls = kp_classes(api_key)
    req = req_cls(version=version, **_structs(req_cls.fields, fields, version))
    req.with_header(correlation_id=4242, client_id="kp")
    wire.writer.write(bytes(req.encode(header=True, framed=True)))
    await wire.writer.drain()
    frame = await wire.read_frame()
    resp = resp_cls.decode(frame, version=version, header=True)
    assert resp.header.correlation_id == 4242
    return resp


def _structs(specs: dict[str, Any], fields: dict[str, Any], version: int) -> dict[str, Any]:
    """``fields`` with each struct given as a dict made into kafka-python's struct class."""
    out = dict(fields)
    for f in specs.values():
        value = out.get(f.name)
        if value is None:
            continue
        if f.is_struct_array():
            out[f.name] = [
                f.data_class(version=version, **_structs(f.fields, v, version)) for v in value
            ]
        elif f.is_struct():
            out[f.name] = f.data_class(version=version, **_structs(f.fields, value, version))
    return out


async def sasl_login(wire: WireClient, user: str) -> None:
    assert (await wire.request(17, 1, {"mechanism": "PLAIN"}))["error_code"] == 0
    auth = f"\0{user}\0{user}-secret".encode()
    assert (await wire.request(36, 2, {"auth_bytes": auth}))["error_code"] == 0


def port_of(server: KafkaServer, name: str) -> int:
    return next(p for listener, p, _ in server.bound if listener.name == name)


@pytest_asyncio.fixture
async def secured(tmp_path: Path) -> AsyncIterator[KafkaServer]:
    users = tmp_path / "users.txt"
    users.write_text(USERS)
    async with running_server(
        log_level="warning",
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        sasl_users=str(users),
    ) as srv:
        yield srv


# --- delegation tokens ---------------------------------------------------------------------


async def test_token_requests_over_plaintext_are_not_allowed(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        for v in versions(38):
            fields: dict[str, Any] = {"renewers": [], "max_lifetime_ms": -1}
            if v >= 3:
                fields |= {"owner_principal_type": None, "owner_principal_name": None}
            r = await kp_request(wire, 38, v, **fields)
            assert r.error_code == NOT_ALLOWED
            assert (r.principal_type, r.principal_name) == ("User", "ANONYMOUS")
            if v >= 3:
                assert (r.token_requester_principal_type, r.token_requester_principal_name) == (
                    "User",
                    "ANONYMOUS",
                )
            assert (r.issue_timestamp_ms, r.expiry_timestamp_ms, r.max_timestamp_ms) == (-1,) * 3
            assert (r.token_id, bytes(r.hmac)) == ("", b"")
        for key, period in ((39, "renew_period_ms"), (40, "expiry_time_period_ms")):
            for v in versions(key):
                r = await kp_request(wire, key, v, hmac=b"\x01\x02", **{period: 1000})
                assert (r.error_code, r.expiry_timestamp_ms) == (NOT_ALLOWED, -1)
        for v in versions(41):
            r = await kp_request(wire, 41, v, owners=None)
            assert (r.error_code, list(r.tokens)) == (NOT_ALLOWED, [])


async def test_token_requests_over_sasl_find_tokens_disabled(secured: KafkaServer) -> None:
    async with await WireClient.connect(port_of(secured, "SASL_PLAINTEXT")) as wire:
        await sasl_login(wire, "alice")
        for v in versions(38):
            fields: dict[str, Any] = {"renewers": [], "max_lifetime_ms": -1}
            if v >= 3:
                fields |= {"owner_principal_type": "User", "owner_principal_name": "bob"}
            r = await kp_request(wire, 38, v, **fields)
            assert r.error_code == DISABLED
            # v3 names another owner (no authorizer: allowed), older versions the requester
            owner = "bob" if v >= 3 else "alice"
            assert (r.principal_type, r.principal_name) == ("User", owner)
            if v >= 3:
                assert r.token_requester_principal_name == "alice"
            assert (r.issue_timestamp_ms, r.expiry_timestamp_ms, r.max_timestamp_ms) == (0,) * 3
        renewer = {"principal_type": "Group", "principal_name": "ops"}
        r = await kp_request(wire, 38, 2, renewers=[renewer], max_lifetime_ms=-1)
        assert r.error_code == BAD_PRINCIPAL
        for key, period in ((39, "renew_period_ms"), (40, "expiry_time_period_ms")):
            for v in versions(key):
                r = await kp_request(wire, key, v, hmac=b"\x01", **{period: -1})
                assert (r.error_code, r.expiry_timestamp_ms) == (DISABLED, 0)
        for v in versions(41):
            owners = [{"principal_type": "User", "principal_name": "alice"}]
            r = await kp_request(wire, 41, v, owners=owners)
            assert (r.error_code, list(r.tokens)) == (DISABLED, [])


async def test_a_token_for_another_owner_needs_create_tokens_on_it(tmp_path: Path) -> None:
    from kgroupd.broker.security.acls import AclBinding, Operation, PatternType, ResourceType

    users = tmp_path / "users.txt"
    users.write_text(USERS)
    async with (
        running_server(
            log_level="warning",
            listeners="SASL_PLAINTEXT://127.0.0.1:0",
            sasl_users=str(users),
            authorizer="acl",
            super_users="User:root",
        ) as server,
        await WireClient.connect(server.port) as wire,
    ):
        await sasl_login(wire, "alice")
        fields = {"renewers": [], "max_lifetime_ms": -1, "owner_principal_type": "User"}
        r = await kp_request(wire, 38, 3, owner_principal_name="bob", **fields)
        assert r.error_code == TOKEN_AUTH
        r = await kp_request(wire, 38, 3, owner_principal_name="alice", **fields)
        assert r.error_code == DISABLED  # one's own token needs no ACL
        assert server.broker.authorizer is not None
        server.broker.authorizer.add(
            [
                AclBinding(
                    ResourceType.USER,
                    "User:bob",
                    PatternType.LITERAL,
                    "User:alice",
                    "*",
                    Operation.CREATE_TOKENS,
                    3,  # ALLOW
                )
            ]
        )
        r = await kp_request(wire, 38, 3, owner_principal_name="bob", **fields)
        assert r.error_code == DISABLED


# --- DescribeQuorum --------------------------------------------------------------------------


async def test_describe_quorum_is_a_quorum_of_one_voter(server: KafkaServer) -> None:
    node = server.broker.node_id
    async with await WireClient.connect(server.port) as wire:
        for v in versions(55):
            topics = [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
            r = await kp_request(wire, 55, v, topics=topics)
            assert r.error_code == 0
            (topic,) = r.topics
            assert topic.topic_name == "__cluster_metadata"
            (p,) = topic.partitions
            assert (p.partition_index, p.error_code, p.leader_id, p.leader_epoch) == (0, 0, node, 1)
            (voter,) = p.current_voters
            assert voter.replica_id == node and list(p.observers) == []
            assert voter.log_end_offset == p.high_watermark
            if v >= 1:  # the leader's own fetch and catch-up times: now
                assert voter.last_fetch_timestamp > 0
                assert voter.last_caught_up_timestamp == voter.last_fetch_timestamp
            if v >= 2:
                assert voter.replica_directory_id is None  # kafka-python's zero UUID
                assert [(n.node_id, list(n.listeners)) for n in r.nodes] == [(node, [])]
        wrong = [
            [{"topic_name": "t", "partitions": [{"partition_index": 0}]}],
            [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 1}]}],
            [
                {
                    "topic_name": "__cluster_metadata",
                    "partitions": [{"partition_index": 0}, {"partition_index": 1}],
                }
            ],
        ]
        for topics in wrong:
            r = await kp_request(wire, 55, 2, topics=topics)
            assert r.error_code == 0
            got = [
                (t.topic_name, p.partition_index, p.error_code, p.error_message)
                for t in r.topics
                for p in t.partitions
            ]
            message = "This server does not host this topic-partition."
            assert got == [
                (t["topic_name"], p["partition_index"], UNKNOWN_TOPIC, message)
                for t in topics
                for p in t["partitions"]
            ]


# --- UpdateFeatures --------------------------------------------------------------------------


def update(feature: str, level: int, upgrade_type: int = 1) -> dict[str, Any]:
    return {
        "feature": feature,
        "max_version_level": level,
        "allow_downgrade": False,
        "upgrade_type": upgrade_type,
    }


async def test_update_features_validates_as_kafka_does(server: KafkaServer) -> None:
    node = server.broker.node_id
    tv = server.broker.config.transaction_version  # 2 by default
    async with await WireClient.connect(server.port) as wire:

        async def refused(updates: list[dict[str, Any]], validate_only: bool = False) -> str:
            r = await kp_request(
                wire, 57, 2, timeout_ms=1000, feature_updates=updates, validate_only=validate_only
            )
            assert r.error_code == INVALID_UPDATE_VERSION
            assert r.error_message.startswith(REFUSED_ALL)
            return str(r.error_message[len(REFUSED_ALL) :])

        for v in versions(57):
            fields: dict[str, Any] = {
                "timeout_ms": 1000,
                "feature_updates": [update("group.version", 1), update("transaction.version", tv)],
            }
            if v >= 1:
                fields["validate_only"] = False
            r = await kp_request(wire, 57, v, **fields)
            assert (r.error_code, r.error_message) == (0, None)
            if v <= 1:  # v2 answers no per-feature results
                assert [(x.feature, x.error_code, x.error_message) for x in r.results] == [
                    ("group.version", 0, "NONE"),
                    ("transaction.version", 0, "NONE"),
                ]
        # a change validated only: as Kafka answers it
        r = await kp_request(
            wire,
            57,
            2,
            timeout_ms=1000,
            feature_updates=[update("transaction.version", 1, 2)],
            validate_only=True,
        )
        assert (r.error_code, r.error_message) == (0, None)
        prefix = "Invalid update version"
        assert await refused([update("transaction.version", 3)]) == (
            f"{prefix} 3 for feature transaction.version. "
            f"Local controller {node} only supports versions 0-2"
        )
        assert await refused([update("transaction.version", 1)]) == (
            f"{prefix} 1 for feature transaction.version. Can't downgrade the version of this "
            "feature without setting the upgrade type to either safe or unsafe downgrade."
        )
        assert await refused([update("transaction.version", 2, 9)]) == (
            f"{prefix} 2 for feature transaction.version. "
            "The controller does not support the given upgrade type."
        )
        assert await refused([update("group.version", -1)]) == (
            f"{prefix} -1 for feature group.version. A feature version cannot be less than 0."
        )
        assert await refused([update("metadata.version", 27)]) == (
            f"{prefix} 27 for feature metadata.version. "
            f"Local controller {node} does not support this feature."
        )
        assert await refused([update("no.such.feature", 0)]) == (
            f"{prefix} 0 for feature no.such.feature. Feature no.such.feature not found."
        )
        # the first error fails the whole request: the valid update before it is not applied
        message = await refused(
            [update("group.version", 1), update("eligible.leader.replicas.version", 1)]
        )
        assert message.startswith(f"{prefix} 1 for feature eligible.leader.replicas.version.")
        # a feature Kafka knows, not finalized here: setting it to 0 changes nothing
        r = await kp_request(
            wire, 57, 1, timeout_ms=1000, feature_updates=[update("streams.version", 0)]
        )
        assert r.error_code == 0
        # a valid change kgroupd cannot make while it runs
        message = await refused([update("transaction.version", 1, 2)])
        assert message.startswith(f"{prefix} 1 for feature transaction.version. kgroupd sets")
        assert "--transaction-version" in message
        versions_answer = await wire.request(18, 3, {})
        finalized = {
            f["name"]: f["max_version_level"] for f in versions_answer["finalized_features"]
        }
        assert finalized == {"group.version": 1, "transaction.version": tv, "share.version": 1}


# --- ListConfigResources ---------------------------------------------------------------------


async def test_list_config_resources_lists_what_kgroupd_has(server: KafkaServer) -> None:
    node = str(server.broker.node_id)
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, "listed", 1)
        body = {
            "resources": [
                {
                    "resource_type": GROUP,
                    "resource_name": "configured",
                    "configs": [
                        {
                            "name": "share.auto.offset.reset",
                            "config_operation": 0,
                            "value": "earliest",
                        }
                    ],
                }
            ],
            "validate_only": False,
        }
        assert (await wire.request(44, 1, body))["responses"][0]["error_code"] == 0
        r = await kp_request(wire, 74, 1, resource_types=[])
        assert r.error_code == 0
        got = [(c.resource_name, c.resource_type) for c in r.config_resources]
        assert got == [("configured", GROUP), (node, BROKER), ("listed", TOPIC)]
        r = await kp_request(wire, 74, 1, resource_types=[TOPIC, GROUP])
        got = [(c.resource_name, c.resource_type) for c in r.config_resources]
        assert got == [("configured", GROUP), ("listed", TOPIC)]
        r = await kp_request(wire, 74, 1, resource_types=[BROKER_LOGGER, CLIENT_METRICS])
        assert (r.error_code, list(r.config_resources)) == (0, [])
        r = await kp_request(wire, 74, 1, resource_types=[TOPIC, 1])
        assert (r.error_code, list(r.config_resources)) == (UNSUPPORTED_VERSION, [])
        # v0 is ListClientMetricsResources: only client metrics resources, of which none
        r = await kp_request(wire, 74, 0)
        assert (r.error_code, list(r.config_resources)) == (0, [])


# --- UnregisterBroker, AddRaftVoter, RemoveRaftVoter ------------------------------------------

INVALID_REQUEST, BROKER_NOT_REGISTERED, INCONSISTENT_CLUSTER = 42, 102, 104
DIRECTORY = uuid.UUID(int=7)


async def test_unregister_broker_knows_only_this_broker(server: KafkaServer) -> None:
    node = server.broker.node_id
    async with await WireClient.connect(server.port) as wire:
        r = await kp_request(wire, 64, 0, broker_id=node)
        assert (r.error_code, r.error_message) == (0, None)
        r = await kp_request(wire, 64, 0, broker_id=node + 1)
        assert (r.error_code, r.error_message) == (BROKER_NOT_REGISTERED, None)
        # still serving: it was not really unregistered
        assert (await kp_request(wire, 64, 0, broker_id=node)).error_code == 0


async def test_a_static_quorum_takes_no_voter_changes(server: KafkaServer) -> None:
    cluster = server.broker.cluster_id
    controller = [{"name": "CONTROLLER", "host": "h", "port": 9093}]
    static = "Cluster doesn't support {} voter because the kraft.version feature is 0"
    async with await WireClient.connect(server.port) as wire:
        for v in versions(80):
            fields: dict[str, Any] = {"timeout_ms": 1000, "voter_id": 5}
            if v >= 1:
                fields["ack_when_committed"] = True
            for cid in (None, cluster):
                r = await kp_request(
                    wire,
                    80,
                    v,
                    cluster_id=cid,
                    voter_directory_id=DIRECTORY,
                    listeners=controller,
                    **fields,
                )
                assert (r.error_code, r.error_message) == (
                    UNSUPPORTED_VERSION,
                    static.format("adding"),
                )
            r = await kp_request(
                wire,
                80,
                v,
                cluster_id="other",
                voter_directory_id=DIRECTORY,
                listeners=controller,
                **fields,
            )
            assert r.error_code == INCONSISTENT_CLUSTER
            assert (
                r.error_message == f'The given id "other" doesn\'t match the cluster id "{cluster}"'
            )
            r = await kp_request(
                wire,
                80,
                v,
                cluster_id=None,
                voter_directory_id=None,
                listeners=controller,
                **fields,
            )
            assert (r.error_code, r.error_message) == (
                INVALID_REQUEST,
                "Add voter request didn't include a valid voter",
            )
            r = await kp_request(
                wire,
                80,
                v,
                cluster_id=None,
                voter_directory_id=DIRECTORY,
                listeners=[{"name": "EXTERNAL", "host": "h", "port": 1}],
                **fields,
            )
            assert r.error_code == INVALID_REQUEST
            assert r.error_message == (
                "Add voter request didn't include the endpoint (Endpoints(endpoints="
                "{ListenerName(EXTERNAL)=h/<unresolved>:1})) for the default listener "
                "ListenerName(CONTROLLER)"
            )
        r = await kp_request(wire, 81, 0, cluster_id=None, voter_id=0, voter_directory_id=DIRECTORY)
        assert (r.error_code, r.error_message) == (UNSUPPORTED_VERSION, static.format("removing"))
        r = await kp_request(wire, 81, 0, cluster_id="x", voter_id=0, voter_directory_id=DIRECTORY)
        assert r.error_code == INCONSISTENT_CLUSTER
        r = await kp_request(wire, 81, 0, cluster_id=cluster, voter_id=0, voter_directory_id=None)
        assert (r.error_code, r.error_message) == (
            INVALID_REQUEST,
            "Remove voter request didn't include a valid voter",
        )
