"""The one table of what every API checks under ``--authorizer acl``, as Kafka 4.3's
KafkaApis checks it: ``ACCESS[api_key]`` lists the (resource type, operation) rules the
API applies and, for requests that are allowed or refused whole, the ``gate`` the connection
runs before the handler (a refused request is answered with the rule's error in the
response's top-level error field). Rules applied per topic, group or transactional id are
applied by the handler (``RequestContext.denies``) so that the rest of the request is served,
as Kafka serves it. An API missing from the table is refused (CLUSTER_AUTHORIZATION_FAILED):
the table test fails first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kgroupd.broker.security.acls import CLUSTER_NAME, Access, Operation, ResourceType
from kgroupd.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class Rule:
    resource_type: ResourceType
    operation: Operation
    error: ErrorCode
    key: int = field(init=False, repr=False, compare=False)  # Access.granted's key

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.resource_type << 8 | self.operation)

    def denies(self, access: Access | None, name: str) -> bool:
        # a name allowed before is in the connection's set: no call (else ask, and cache)
        return (
            access is not None
            and name not in access.granted[self.key]
            and not access.allowed(self.resource_type, name, self.operation)
        )


_T, _G, _C, _X = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = (
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
TOPIC_READ = Rule(_T, Operation.READ, TOPIC_AUTH)
TOPIC_WRITE = Rule(_T, Operation.WRITE, TOPIC_AUTH)
TOPIC_DESCRIBE = Rule(_T, Operation.DESCRIBE, TOPIC_AUTH)
TOPIC_CREATE = Rule(_T, Operation.CREATE, TOPIC_AUTH)
TOPIC_DELETE = Rule(_T, Operation.DELETE, TOPIC_AUTH)
TOPIC_ALTER = Rule(_T, Operation.ALTER, TOPIC_AUTH)
TOPIC_DESCRIBE_CONFIGS = Rule(_T, Operation.DESCRIBE_CONFIGS, TOPIC_AUTH)
TOPIC_ALTER_CONFIGS = Rule(_T, Operation.ALTER_CONFIGS, TOPIC_AUTH)
GROUP_READ = Rule(_G, Operation.READ, GROUP_AUTH)
GROUP_DESCRIBE = Rule(_G, Operation.DESCRIBE, GROUP_AUTH)
GROUP_DELETE = Rule(_G, Operation.DELETE, GROUP_AUTH)
GROUP_DESCRIBE_CONFIGS = Rule(_G, Operation.DESCRIBE_CONFIGS, GROUP_AUTH)
GROUP_ALTER_CONFIGS = Rule(_G, Operation.ALTER_CONFIGS, GROUP_AUTH)
CLUSTER_DESCRIBE = Rule(_C, Operation.DESCRIBE, CLUSTER_AUTH)
CLUSTER_ALTER = Rule(_C, Operation.ALTER, CLUSTER_AUTH)
CLUSTER_CREATE = Rule(_C, Operation.CREATE, CLUSTER_AUTH)
CLUSTER_DESCRIBE_CONFIGS = Rule(_C, Operation.DESCRIBE_CONFIGS, CLUSTER_AUTH)
CLUSTER_ALTER_CONFIGS = Rule(_C, Operation.ALTER_CONFIGS, CLUSTER_AUTH)
CLUSTER_IDEMPOTENT_WRITE = Rule(_C, Operation.IDEMPOTENT_WRITE, CLUSTER_AUTH)
CLUSTER_ACTION = Rule(_C, Operation.CLUSTER_ACTION, CLUSTER_AUTH)
TXN_WRITE = Rule(_X, Operation.WRITE, TXN_AUTH)
TXN_DESCRIBE = Rule(_X, Operation.DESCRIBE, TXN_AUTH)
# Delegation tokens: another owner's token needs CREATE_TOKENS / DESCRIBE_TOKENS on that user
_TOKEN_AUTH = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
USER_CREATE_TOKENS = Rule(ResourceType.USER, Operation.CREATE_TOKENS, _TOKEN_AUTH)
USER_DESCRIBE_TOKENS = Rule(ResourceType.USER, Operation.DESCRIBE_TOKENS, _TOKEN_AUTH)
TOKEN_DESCRIBE = Rule(ResourceType.DELEGATION_TOKEN, Operation.DESCRIBE, _TOKEN_AUTH)

Gate = Callable[[Access, dict[str, Any]], ErrorCode | None]


@dataclass(frozen=True, slots=True)
class ApiAccess:
    rules: tuple[Rule, ...]  # every rule the API applies (gate and handler)
    gate: Gate | None = None  # the whole-request check, run by the connection


def _on(rule: Rule, field: str) -> Gate:
    """Refuse the whole request unless ``rule`` allows the resource named by ``field``."""

    def gate(access: Access, req: dict[str, Any]) -> ErrorCode | None:
        return rule.error if rule.denies(access, req[field] or "") else None

    return gate


def _cluster(rule: Rule) -> Gate:
    def gate(access: Access, req: dict[str, Any]) -> ErrorCode | None:
        return rule.error if rule.denies(access, CLUSTER_NAME) else None

    return gate


def _consumer_group_heartbeat(access: Access, req: dict[str, Any]) -> ErrorCode | None:
    if GROUP_READ.denies(access, req["group_id"] or ""):
        return GROUP_AUTH
    for topic in req.get("subscribed_topic_names") or ():
        if TOPIC_DESCRIBE.denies(access, topic):
            return TOPIC_AUTH
    return None


def _add_offsets_to_txn(access: Access, req: dict[str, Any]) -> ErrorCode | None:
    if TXN_WRITE.denies(access, req["transactional_id"] or ""):
        return TXN_AUTH
    if GROUP_READ.denies(access, req["group_id"] or ""):
        return GROUP_AUTH
    return None


def _init_producer_id(access: Access, req: dict[str, Any]) -> ErrorCode | None:
    """A transactional id needs WRITE on it; an idempotent producer needs IDEMPOTENT_WRITE on
    the cluster or WRITE on some topic (Kafka 2.8+)."""
    txn = req["transactional_id"]
    if txn is not None:
        return TXN_AUTH if TXN_WRITE.denies(access, txn) else None
    if not CLUSTER_IDEMPOTENT_WRITE.denies(access, CLUSTER_NAME):
        return None
    return None if access.any_allowed(_T, Operation.WRITE) else CLUSTER_AUTH


def _offset_delete(access: Access, req: dict[str, Any]) -> ErrorCode | None:
    if GROUP_DELETE.denies(access, req["group_id"] or ""):
        return GROUP_AUTH
    for topic in req["topics"] or ():
        if TOPIC_READ.denies(access, topic["name"] or ""):
            return TOPIC_AUTH
    return None


_GROUP_MEMBER = ApiAccess((GROUP_READ,), _on(GROUP_READ, "group_id"))

_DESCRIBE_CONFIGS = ApiAccess(
    (TOPIC_DESCRIBE_CONFIGS, CLUSTER_DESCRIBE_CONFIGS, GROUP_DESCRIBE_CONFIGS)
)
_ALTER_CONFIGS = ApiAccess((TOPIC_ALTER_CONFIGS, CLUSTER_ALTER_CONFIGS, GROUP_ALTER_CONFIGS))

ACCESS: dict[int, ApiAccess] = {
    0: ApiAccess((TXN_WRITE, TOPIC_WRITE)),  # Produce
    1: ApiAccess((TOPIC_READ,)),  # Fetch
    2: ApiAccess((TOPIC_DESCRIBE,)),  # ListOffsets
    3: ApiAccess((TOPIC_DESCRIBE, CLUSTER_CREATE, TOPIC_CREATE)),  # Metadata
    8: ApiAccess((GROUP_READ, TOPIC_READ)),  # OffsetCommit
    9: ApiAccess((GROUP_DESCRIBE, TOPIC_DESCRIBE)),  # OffsetFetch
    10: ApiAccess((GROUP_DESCRIBE, TXN_DESCRIBE, CLUSTER_ACTION)),  # FindCoordinator
    11: _GROUP_MEMBER,  # JoinGroup
    12: _GROUP_MEMBER,  # Heartbeat
    13: _GROUP_MEMBER,  # LeaveGroup
    14: _GROUP_MEMBER,  # SyncGroup
    15: ApiAccess((GROUP_DESCRIBE,)),  # DescribeGroups
    16: ApiAccess((CLUSTER_DESCRIBE, GROUP_DESCRIBE)),  # ListGroups
    17: ApiAccess(()),  # SaslHandshake
    18: ApiAccess(()),  # ApiVersions
    19: ApiAccess((CLUSTER_CREATE, TOPIC_CREATE, TOPIC_DESCRIBE_CONFIGS)),  # CreateTopics
    20: ApiAccess((TOPIC_DELETE,)),  # DeleteTopics
    21: ApiAccess((TOPIC_DELETE,)),  # DeleteRecords
    22: ApiAccess((TXN_WRITE, CLUSTER_IDEMPOTENT_WRITE, TOPIC_WRITE), _init_producer_id),
    23: ApiAccess((CLUSTER_ACTION, TOPIC_DESCRIBE)),  # OffsetForLeaderEpoch
    24: ApiAccess((TXN_WRITE, TOPIC_WRITE)),  # AddPartitionsToTxn
    25: ApiAccess((TXN_WRITE, GROUP_READ), _add_offsets_to_txn),  # AddOffsetsToTxn
    26: ApiAccess((TXN_WRITE,), _on(TXN_WRITE, "transactional_id")),  # EndTxn
    28: ApiAccess((TXN_WRITE, GROUP_READ, TOPIC_READ)),  # TxnOffsetCommit
    29: ApiAccess((CLUSTER_DESCRIBE,), _cluster(CLUSTER_DESCRIBE)),  # DescribeAcls
    30: ApiAccess((CLUSTER_ALTER,)),  # CreateAcls
    31: ApiAccess((CLUSTER_ALTER,)),  # DeleteAcls
    32: ApiAccess(
        (TOPIC_DESCRIBE_CONFIGS, CLUSTER_DESCRIBE_CONFIGS, GROUP_DESCRIBE_CONFIGS)
    ),  # DescribeConfigs
    33: ApiAccess(
        (TOPIC_ALTER_CONFIGS, CLUSTER_ALTER_CONFIGS, GROUP_ALTER_CONFIGS)
    ),  # AlterConfigs
    34: ApiAccess((CLUSTER_ALTER,)),  # AlterReplicaLogDirs
    35: ApiAccess((CLUSTER_DESCRIBE,), _cluster(CLUSTER_DESCRIBE)),  # DescribeLogDirs
    36: ApiAccess(()),  # SaslAuthenticate
    37: ApiAccess((TOPIC_ALTER,)),  # CreatePartitions
    42: ApiAccess((GROUP_DELETE,)),  # DeleteGroups
    43: ApiAccess((CLUSTER_ALTER,)),  # ElectLeaders
    44: ApiAccess(
        (TOPIC_ALTER_CONFIGS, CLUSTER_ALTER_CONFIGS, GROUP_ALTER_CONFIGS)
    ),  # IncrementalAlterConfigs
    45: ApiAccess((CLUSTER_ALTER,)),  # AlterPartitionReassignments
    46: ApiAccess((CLUSTER_DESCRIBE,)),  # ListPartitionReassignments
    47: ApiAccess((GROUP_DELETE, TOPIC_READ), _offset_delete),  # OffsetDelete
    48: ApiAccess((CLUSTER_DESCRIBE_CONFIGS,)),  # DescribeClientQuotas
    49: ApiAccess((CLUSTER_ALTER_CONFIGS,)),  # AlterClientQuotas
    50: ApiAccess((CLUSTER_DESCRIBE,), _cluster(CLUSTER_DESCRIBE)),  # DescribeUserScram...
    51: ApiAccess((CLUSTER_ALTER,)),  # AlterUserScramCredentials
    38: ApiAccess((USER_CREATE_TOKENS,)),  # CreateDelegationToken
    39: ApiAccess(()),  # RenewDelegationToken: the token's owner or renewers, no ACL
    40: ApiAccess(()),  # ExpireDelegationToken: likewise
    41: ApiAccess((TOKEN_DESCRIBE, USER_DESCRIBE_TOKENS)),  # DescribeDelegationToken
    55: ApiAccess((CLUSTER_DESCRIBE,), _cluster(CLUSTER_DESCRIBE)),  # DescribeQuorum
    57: ApiAccess((CLUSTER_ALTER,), _cluster(CLUSTER_ALTER)),  # UpdateFeatures
    64: ApiAccess((CLUSTER_ALTER,), _cluster(CLUSTER_ALTER)),  # UnregisterBroker
    80: ApiAccess((CLUSTER_ALTER,), _cluster(CLUSTER_ALTER)),  # AddRaftVoter
    81: ApiAccess((CLUSTER_ALTER,), _cluster(CLUSTER_ALTER)),  # RemoveRaftVoter
    # ListConfigResources: topics are listed if the principal may describe their configs
    74: ApiAccess(
        (CLUSTER_DESCRIBE_CONFIGS, TOPIC_DESCRIBE_CONFIGS), _cluster(CLUSTER_DESCRIBE_CONFIGS)
    ),
    60: ApiAccess((CLUSTER_DESCRIBE,)),  # DescribeCluster: for its authorized operations only
    61: ApiAccess((TOPIC_READ,)),  # DescribeProducers
    65: ApiAccess((TXN_DESCRIBE, TOPIC_DESCRIBE)),  # DescribeTransactions
    66: ApiAccess((TXN_DESCRIBE,)),  # ListTransactions
    68: ApiAccess((GROUP_READ, TOPIC_DESCRIBE), _consumer_group_heartbeat),
    69: ApiAccess((GROUP_DESCRIBE, TOPIC_DESCRIBE)),  # ConsumerGroupDescribe
    71: ApiAccess(()),  # GetTelemetrySubscriptions
    72: ApiAccess(()),  # PushTelemetry
    75: ApiAccess((TOPIC_DESCRIBE,)),  # DescribeTopicPartitions
    76: ApiAccess((GROUP_READ, TOPIC_DESCRIBE), _on(GROUP_READ, "group_id")),  # ShareGroupHb
    78: ApiAccess((GROUP_READ, TOPIC_READ), _on(GROUP_READ, "group_id")),  # ShareFetch
    79: ApiAccess((GROUP_READ, TOPIC_READ), _on(GROUP_READ, "group_id")),  # ShareAcknowledge
    77: ApiAccess((GROUP_DESCRIBE, TOPIC_DESCRIBE)),  # ShareGroupDescribe
    90: ApiAccess((GROUP_DESCRIBE, TOPIC_DESCRIBE)),  # DescribeShareGroupOffsets
    91: ApiAccess((GROUP_READ, TOPIC_READ), _on(GROUP_READ, "group_id")),  # AlterShareGroupOffs.
    92: ApiAccess((GROUP_DELETE, TOPIC_READ), _on(GROUP_DELETE, "group_id")),  # DeleteShareGr...
}
