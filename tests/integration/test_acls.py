"""ACLs (``--authorizer acl``) as Kafka's StandardAuthorizer applies them (issue 15).

- Generated from the handler registry: every served API has an entry in the one table
  (``kgroupd.broker.security.rules.ACCESS``), and each, sent at its newest version with every field
  naming existing resources, by a principal with no ACLs, is refused with an authorization
  error (or, for the listing APIs, shows nothing); only ApiVersions and the SASL requests are
  open.
- Real clients: an aiokafka consumer without READ on its group gets
  GROUP_AUTHORIZATION_FAILED; a principal limited by a prefixed ACL sees only its topics and
  groups; a deny beats an allow; super users pass everything; ACLs made with the Java-style
  admin APIs (kafka-python's KafkaAdminClient.create_acls / describe_acls / delete_acls)
  survive a restart with ``--data-dir``, as SCRAM users do.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.handlers import HANDLERS
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.security.acls import (
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from kgroupd.broker.security.rules import ACCESS
from kgroupd.broker.testing import running_server
from kgroupd.protocol.codec import ArrayOf, F
from kgroupd.protocol.schemas import DEFINITIONS
from tests.integration.test_fuzz_requests import ask
from tests.support.fuzz import cases, check_answers, generated_frames
from tests.support.kafka_wire import WireClient, create_topic

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

AUTH_ERRORS = {29, 30, 31, 53}  # TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID _AUTHORIZATION_FAILED
# SaslHandshake, ApiVersions, SaslAuthenticate, GetTelemetrySubscriptions, PushTelemetry;
# RenewDelegationToken, ExpireDelegationToken (a token's owner and renewers may, no ACL)
OPEN_APIS = {17, 18, 36, 71, 72, 39, 40}
# CreateDelegationToken, DescribeDelegationToken: over PLAINTEXT Kafka refuses them before
# any ACL, with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
TOKEN_APIS, TOKEN_REQUEST_NOT_ALLOWED = {38, 41}, 64
LISTING_APIS = {16, 66}  # ListGroups, ListTransactions: filtered, not refused
# DescribeCluster: answered to anyone, as Kafka does; only its authorized operations need
# DESCRIBE on the cluster (0 without it)
DESCRIBE_CLUSTER = 60
USERS = "alice:alice-secret\nbob:bob-secret\nroot:root-secret\n"


@pytest.fixture
def users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users.txt"
    path.write_text(USERS)
    return path


def secured(users_file: Path, **more: Any) -> dict[str, Any]:
    return {
        "log_level": "warning",
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl_users": str(users_file),
        "authorizer": "acl",
        "super_users": "User:root",
        "initial_rebalance_delay_ms": 0,
        **more,
    }


@pytest_asyncio.fixture
async def server(users_file: Path) -> AsyncIterator[KafkaServer]:
    async with running_server(**secured(users_file)) as srv:
        yield srv


def port_of(server: KafkaServer, name: str) -> int:
    return next(p for listener, p, _ in server.bound if listener.name == name)


def sasl(server: KafkaServer, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": f"127.0.0.1:{port_of(server, 'SASL_PLAINTEXT')}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": f"{user}-secret",
    }


def allow(
    server: KafkaServer,
    principal: str,
    rtype: ResourceType,
    name: str,
    op: Operation,
    pattern: PatternType = PatternType.LITERAL,
    permission: Permission = Permission.ALLOW,
) -> None:
    """An ACL added the way CreateAcls adds it (the wire path has its own test)."""
    from kgroupd.broker.security.acls import AclBinding

    authorizer = server.broker.authorizer
    assert authorizer is not None
    authorizer.add([AclBinding(rtype, name, pattern, principal, "*", op, permission)])


# --- the table, generated from the registry -------------------------------------------------


def test_every_served_api_has_an_entry_in_the_table() -> None:
    missing = sorted(set(HANDLERS) - set(ACCESS))
    assert not missing, f"APIs with no authorization entry: {missing}"
    assert {k for k, a in ACCESS.items() if not a.rules} == OPEN_APIS


def _value(f: F, topic_id: uuid.UUID) -> Any:
    t = f.type
    if f.name in ("resource_type", "resource_type_filter"):
        return int(ResourceType.TOPIC)
    if f.name == "acks":
        return 1
    if f.name == "key_type":
        return 0
    if f.name in ("pattern_type_filter", "resource_pattern_type"):
        return int(PatternType.LITERAL)
    if f.name in ("operation", "permission_type"):
        return 3  # READ / ALLOW
    if f.name in ("principal", "principal_filter"):
        return "User:mallory"
    if f.name in ("host", "host_filter"):
        return "*"
    if isinstance(t, list):
        return None  # filled by _fill
    if isinstance(t, ArrayOf):
        return [_primitive(t.item.name, topic_id)]
    return _primitive(t.name, topic_id)


def _primitive(kind: str, topic_id: uuid.UUID) -> Any:
    return {
        "string": "t",
        "uuid": topic_id,
        "bool": False,
        "bytes": b"",
        "records": None,
        "float64": 0.0,
    }.get(kind, 0)


def _fill(fields: list[F], version: int, topic_id: uuid.UUID) -> dict[str, Any]:
    """Every field of the request naming the resource "t" (topic, group, transactional id
    alike), arrays with one element."""
    out: dict[str, Any] = {}
    for f in fields:
        if version not in f.vr:
            continue
        if isinstance(f.type, list):
            inner = _fill(f.type, version, topic_id)
            out[f.name] = inner if f.struct else [inner]
        else:
            out[f.name] = _value(f, topic_id)
    return out


def _codes(value: Any) -> set[int]:
    if isinstance(value, dict):
        found = set()
        for k, v in value.items():
            if k.endswith("error_code") and isinstance(v, int):
                found.add(v)
            found |= _codes(v)
        return found
    if isinstance(value, list):
        return set().union(*(_codes(v) for v in value)) if value else set()
    return set()


async def test_every_api_refuses_a_principal_without_acls(server: KafkaServer) -> None:
    """ANONYMOUS on the PLAINTEXT listener: no ACL names it, no super user. Topic, group and
    transactional id "t" all exist, so a refusal cannot be a not-found answer."""
    port = port_of(server, "PLAINTEXT")
    # the resources, made by a super user
    async with await WireClient.connect(port_of(server, "SASL_PLAINTEXT")) as root:
        await root.request(17, 1, {"mechanism": "PLAIN"})
        await root.request(36, 2, {"auth_bytes": b"\0root\0root-secret"})
        await create_topic(root, "t", 1)
        commit = await root.request(
            8,
            2,
            {
                "group_id": "t",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "retention_time_ms": -1,
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
                        ],
                    }
                ],
            },
        )
        assert _codes(commit) == {0}
        init = await root.request(
            22, 1, {"transactional_id": "t", "transaction_timeout_ms": 60_000}
        )
        assert init["error_code"] == 0
    topic = server.broker.topics.get("t")
    assert topic is not None
    let_through = []
    async with await WireClient.connect(port) as wire:
        for api_key in sorted(HANDLERS):
            if api_key in OPEN_APIS:
                continue
            version = HANDLERS[api_key].max_version
            request = _fill(DEFINITIONS[api_key][0].fields, version, topic.topic_id)
            answer = await wire.request(api_key, version, request)
            if api_key in LISTING_APIS:
                listed = answer.get("groups") or answer.get("transaction_states")
                if listed:
                    let_through.append((api_key, answer))
            elif api_key == DESCRIBE_CLUSTER:
                request["include_cluster_authorized_operations"] = True
                request["endpoint_type"] = 1  # BROKER
                answer = await wire.request(api_key, version, request)
                if answer["cluster_authorized_operations"] != 0:
                    let_through.append((api_key, answer))
            elif api_key in TOKEN_APIS:
                if _codes(answer) != {TOKEN_REQUEST_NOT_ALLOWED}:
                    let_through.append((api_key, answer))
            elif not _codes(answer) & AUTH_ERRORS:
                let_through.append((api_key, answer))
    assert not let_through, f"requests let through without ACLs: {let_through}"


# --- real clients ------------------------------------------------------------------------------


async def _produce(server: KafkaServer, user: str, topic: str, count: int = 3) -> None:
    producer = AIOKafkaProducer(**sasl(server, user))
    await producer.start()
    try:
        for i in range(count):
            await producer.send_and_wait(topic, f"v{i}".encode(), partition=0)
    finally:
        await producer.stop()


async def test_a_consumer_without_read_on_its_group_gets_group_authorization_failed(
    server: KafkaServer,
) -> None:
    await _produce(server, "root", "orders")
    allow(server, "User:alice", ResourceType.TOPIC, "orders", Operation.READ)
    consumer = AIOKafkaConsumer(
        "orders", group_id="billing", auto_offset_reset="earliest", **sasl(server, "alice")
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            # refused at the coordinator lookup (FindCoordinator needs DESCRIBE on the group)
            await asyncio.wait_for(consumer.start(), 15)
    finally:
        await consumer.stop()
    # with READ on the group the same consumer reads and commits
    allow(server, "User:alice", ResourceType.GROUP, "billing", Operation.READ)
    consumer = AIOKafkaConsumer(
        "orders",
        group_id="billing",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **sasl(server, "alice"),
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 15)
        assert record.value == b"v0"
        await consumer.commit()
    finally:
        await consumer.stop()


async def test_a_prefixed_acl_shows_only_its_topics_and_groups(server: KafkaServer) -> None:
    for topic in ("team-a.orders", "team-a.payments", "team-b.secrets"):
        await _produce(server, "root", topic, 1)
    for rtype in (ResourceType.TOPIC, ResourceType.GROUP):
        allow(server, "User:bob", rtype, "team-a.", Operation.ALL, PatternType.PREFIXED)
    consumer = AIOKafkaConsumer(group_id="team-a.app", **sasl(server, "bob"))
    await consumer.start()
    try:
        visible = await consumer.topics()
        assert visible == {"team-a.orders", "team-a.payments"}
    finally:
        await consumer.stop()
    # a group outside the prefix is refused; one inside works
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(server, "bob", "team-b.secrets", 1)
    await _produce(server, "bob", "team-a.orders", 1)
    for group in ("team-a.app", "team-b.app"):
        await _commit(server, "root", group, "team-a.orders")
    assert await asyncio.to_thread(_group_ids, server, "root") == ["team-a.app", "team-b.app"]
    assert await asyncio.to_thread(_group_ids, server, "bob") == ["team-a.app"]


async def _commit(server: KafkaServer, user: str, group: str, topic: str) -> None:
    consumer = AIOKafkaConsumer(group_id=group, enable_auto_commit=False, **sasl(server, user))
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.commit({tp: 1})
    finally:
        await consumer.stop()


def _group_ids(server: KafkaServer, user: str) -> list[str]:
    admin = _admin(server, user)
    try:
        groups = admin.list_groups()
    finally:
        admin.close()
    return sorted(g["group_id"] if isinstance(g, dict) else g[0] for g in groups)


async def test_a_deny_beats_an_allow_and_super_users_pass(server: KafkaServer) -> None:
    await _produce(server, "root", "audit", 1)
    allow(server, "User:*", ResourceType.TOPIC, "*", Operation.ALL)
    allow(
        server,
        "User:alice",
        ResourceType.TOPIC,
        "audit",
        Operation.WRITE,
        permission=Permission.DENY,
    )
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(server, "alice", "audit", 1)
    await _produce(server, "bob", "audit", 1)  # the wildcard allow
    await _produce(server, "root", "audit", 1)  # a super user, with no ACL naming it


def _admin(server: KafkaServer, user: str) -> KafkaAdminClient:
    settings = sasl(server, user)
    return KafkaAdminClient(**settings, request_timeout_ms=10_000)


def _acl_roundtrip(server: KafkaServer) -> tuple[list[Any], list[Any]]:
    admin = _admin(server, "root")
    try:
        acl = ACL(
            "User:alice",
            "*",
            ACLOperation.READ,
            ACLPermissionType.ALLOW,
            ResourcePattern(KpResourceType.TOPIC, "reports", ACLResourcePatternType.LITERAL),
        )
        result = admin.create_acls([acl])
        assert result["failed"] == [], result
        any_filter = ACLFilter(
            "User:alice",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        described, error = admin.describe_acls(any_filter)
        assert error.errno == 0
        return described, [acl]
    finally:
        admin.close()


async def test_acls_from_an_admin_client_survive_a_restart(
    users_file: Path, tmp_path: Path
) -> None:
    settings = secured(users_file, data_dir=str(tmp_path / "data"))
    async with running_server(**settings) as srv:
        described, _ = await asyncio.to_thread(_acl_roundtrip, srv)
        assert [(a.principal, a.resource_pattern.resource_name) for a in described] == [
            ("User:alice", "reports")
        ]
        # a principal without ALTER on the cluster cannot add ACLs
        alice = await asyncio.to_thread(_admin, srv, "alice")
        try:
            acl = ACL(
                "User:alice",
                "*",
                ACLOperation.ALL,
                ACLPermissionType.ALLOW,
                ResourcePattern(KpResourceType.TOPIC, "*", ACLResourcePatternType.LITERAL),
            )
            result = await asyncio.to_thread(alice.create_acls, [acl])
            assert len(result["failed"]) == 1
        finally:
            alice.close()
    async with running_server(**settings) as srv:
        authorizer = srv.broker.authorizer
        assert isinstance(authorizer, Authorizer)
        assert authorizer.authorize(
            "User:alice", "127.0.0.1", ResourceType.TOPIC, "reports", Operation.READ
        )
        assert not authorizer.authorize(
            "User:alice", "127.0.0.1", ResourceType.TOPIC, "other", Operation.READ
        )
        admin = await asyncio.to_thread(_admin, srv, "root")
        try:
            any_filter = ACLFilter(
                None,
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
            result = await asyncio.to_thread(admin.delete_acls, [any_filter])
            assert len(result[0][1]) == 1  # the one ACL, deleted
        finally:
            admin.close()
        assert not authorizer.acls


async def test_without_an_authorizer_the_acl_apis_answer_security_disabled() -> None:
    async with running_server(log_level="warning") as srv:
        wire = await WireClient.connect(srv.port)
        answer = await wire.request(
            29,
            3,
            {
                "resource_type_filter": 1,
                "resource_name_filter": None,
                "pattern_type_filter": 1,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            },
        )
        await wire.close()
        assert answer["error_code"] == 54  # SECURITY_DISABLED


# --- generated requests under the authorizer -------------------------------------------------

FUZZ_EXAMPLES = 4


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def acl_server() -> AsyncIterator[KafkaServer]:
    topics = (TopicSpec("t", 2), TopicSpec("fuzz", 1))
    async with running_server(
        log_level="critical",
        create_topics=topics,
        authorizer="acl",
        initial_rebalance_delay_ms=0,
    ) as srv:
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID):
            allow(srv, "User:ANONYMOUS", rtype, "t", Operation.ALL, PatternType.PREFIXED)
        allow(
            srv,
            "User:ANONYMOUS",
            ResourceType.TOPIC,
            "fuzz",
            Operation.WRITE,
            permission=Permission.DENY,
        )
        yield srv


@pytest.mark.parametrize(("api_key", "version"), cases())
@pytest.mark.asyncio(loop_scope="module")
async def test_generated_requests_under_acls_get_no_internal_error(
    acl_server: KafkaServer, api_key: int, version: int
) -> None:
    for frame, body in generated_frames(api_key, version, FUZZ_EXAMPLES):
        out, _closed = await ask(acl_server, frame)
        check_answers(api_key, version, out, body)
