"""kafka-python 3's JSON-driven message classes, the independent codec our definitions are
checked against, and a generator of distinct, non-default values for any of them."""

from __future__ import annotations

import uuid
import warnings
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0.x loads its JSON with the deprecated importlib.resources.read_text at
    # import time, and the project runs pytest with filterwarnings=error.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol import admin as kp_admin
    from kafka.protocol import consumer as kp_consumer
    from kafka.protocol import metadata as kp_metadata
    from kafka.protocol import producer as kp_producer
    from kafka.protocol import sasl as kp_sasl
    from kafka.protocol.admin import acl as kp_acl
    from kafka.protocol.admin import client_quotas as kp_quotas
    from kafka.protocol.admin import cluster as kp_cluster
    from kafka.protocol.admin import configs as kp_configs
    from kafka.protocol.admin import topics as kp_topics
    from kafka.protocol.admin import transactions as kp_transactions
    from kafka.protocol.admin import users as kp_users
    from kafka.protocol.producer import transaction as kp_txn

INT32_MIN = -(2**31)

# api_key -> (kafka-python request class, kafka-python response class)
KP_CLASSES: dict[int, tuple[Any, Any]] = {
    0: (kp_producer.ProduceRequest, kp_producer.ProduceResponse),
    1: (kp_consumer.FetchRequest, kp_consumer.FetchResponse),
    2: (kp_consumer.ListOffsetsRequest, kp_consumer.ListOffsetsResponse),
    3: (kp_metadata.MetadataRequest, kp_metadata.MetadataResponse),
    8: (kp_consumer.OffsetCommitRequest, kp_consumer.OffsetCommitResponse),
    9: (kp_consumer.OffsetFetchRequest, kp_consumer.OffsetFetchResponse),
    10: (kp_metadata.FindCoordinatorRequest, kp_metadata.FindCoordinatorResponse),
    11: (kp_consumer.JoinGroupRequest, kp_consumer.JoinGroupResponse),
    12: (kp_consumer.HeartbeatRequest, kp_consumer.HeartbeatResponse),
    13: (kp_consumer.LeaveGroupRequest, kp_consumer.LeaveGroupResponse),
    14: (kp_consumer.SyncGroupRequest, kp_consumer.SyncGroupResponse),
    15: (kp_admin.DescribeGroupsRequest, kp_admin.DescribeGroupsResponse),
    16: (kp_admin.ListGroupsRequest, kp_admin.ListGroupsResponse),
    18: (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
    19: (kp_admin.CreateTopicsRequest, kp_admin.CreateTopicsResponse),
    20: (kp_admin.DeleteTopicsRequest, kp_admin.DeleteTopicsResponse),
    21: (kp_topics.DeleteRecordsRequest, kp_topics.DeleteRecordsResponse),
    33: (kp_configs.AlterConfigsRequest, kp_configs.AlterConfigsResponse),
    44: (
        kp_configs.IncrementalAlterConfigsRequest,
        kp_configs.IncrementalAlterConfigsResponse,
    ),
    22: (kp_producer.InitProducerIdRequest, kp_producer.InitProducerIdResponse),
    32: (kp_admin.DescribeConfigsRequest, kp_admin.DescribeConfigsResponse),
    37: (kp_admin.CreatePartitionsRequest, kp_admin.CreatePartitionsResponse),
    42: (kp_admin.DeleteGroupsRequest, kp_admin.DeleteGroupsResponse),
    47: (kp_consumer.OffsetDeleteRequest, kp_consumer.OffsetDeleteResponse),
    # defined, not served yet (issue 11); kafka-python 3.0's JSON for these equals 4.3's
    24: (kp_txn.AddPartitionsToTxnRequest, kp_txn.AddPartitionsToTxnResponse),
    25: (kp_txn.AddOffsetsToTxnRequest, kp_txn.AddOffsetsToTxnResponse),
    26: (kp_txn.EndTxnRequest, kp_txn.EndTxnResponse),
    27: (kp_txn.WriteTxnMarkersRequest, kp_txn.WriteTxnMarkersResponse),
    28: (kp_txn.TxnOffsetCommitRequest, kp_txn.TxnOffsetCommitResponse),
    61: (kp_transactions.DescribeProducersRequest, kp_transactions.DescribeProducersResponse),
    65: (
        kp_transactions.DescribeTransactionsRequest,
        kp_transactions.DescribeTransactionsResponse,
    ),
    66: (kp_transactions.ListTransactionsRequest, kp_transactions.ListTransactionsResponse),
    29: (kp_acl.DescribeAclsRequest, kp_acl.DescribeAclsResponse),
    30: (kp_acl.CreateAclsRequest, kp_acl.CreateAclsResponse),
    31: (kp_acl.DeleteAclsRequest, kp_acl.DeleteAclsResponse),
    17: (kp_sasl.SaslHandshakeRequest, kp_sasl.SaslHandshakeResponse),
    36: (kp_sasl.SaslAuthenticateRequest, kp_sasl.SaslAuthenticateResponse),
    50: (
        kp_users.DescribeUserScramCredentialsRequest,
        kp_users.DescribeUserScramCredentialsResponse,
    ),
    51: (kp_users.AlterUserScramCredentialsRequest, kp_users.AlterUserScramCredentialsResponse),
    23: (kp_consumer.OffsetForLeaderEpochRequest, kp_consumer.OffsetForLeaderEpochResponse),
    34: (kp_cluster.AlterReplicaLogDirsRequest, kp_cluster.AlterReplicaLogDirsResponse),
    35: (kp_cluster.DescribeLogDirsRequest, kp_cluster.DescribeLogDirsResponse),
    43: (kp_topics.ElectLeadersRequest, kp_topics.ElectLeadersResponse),
    45: (
        kp_topics.AlterPartitionReassignmentsRequest,
        kp_topics.AlterPartitionReassignmentsResponse,
    ),
    46: (
        kp_topics.ListPartitionReassignmentsRequest,
        kp_topics.ListPartitionReassignmentsResponse,
    ),
    48: (kp_quotas.DescribeClientQuotasRequest, kp_quotas.DescribeClientQuotasResponse),
    49: (kp_quotas.AlterClientQuotasRequest, kp_quotas.AlterClientQuotasResponse),
    60: (kp_cluster.DescribeClusterRequest, kp_cluster.DescribeClusterResponse),
    55: (kp_cluster.DescribeQuorumRequest, kp_cluster.DescribeQuorumResponse),
    57: (kp_cluster.UpdateFeaturesRequest, kp_cluster.UpdateFeaturesResponse),
    74: (kp_configs.ListConfigResourcesRequest, kp_configs.ListConfigResourcesResponse),
    75: (
        kp_topics.DescribeTopicPartitionsRequest,
        kp_topics.DescribeTopicPartitionsResponse,
    ),
}


def _split_fields(fields: dict[str, Any], version: int, flexible: bool) -> tuple[list, list]:
    """(untagged fields in wire order, tagged fields) of a kafka-python struct."""
    present = [f for f in fields.values() if f.for_version_q(version)]
    tagged = [f for f in present if flexible and f.tagged_field_q(version)]
    return [f for f in present if f not in tagged], tagged


class ValueGen:
    """Distinct, non-default values for every field, driven by Kafka's JSON schema.

    Every scalar gets a fresh value (alternating sign), so two same-typed
    fields in the wrong order can never compare equal by accident.
    """

    def __init__(self, *, nulls: bool) -> None:
        self.nulls = nulls
        self.n = 0

    def scalar(self, type_str: str) -> Any:
        self.n += 1
        n = self.n
        sign = -1 if n % 2 else 1
        if type_str == "int8":
            return sign * (n % 100 + 1)
        if type_str == "int16":
            return sign * (300 + n)
        if type_str == "uint16":
            return 40000 + n
        if type_str == "int32":
            return sign * (70_000 + n)
        if type_str == "int64":
            return sign * (2**40 + n)
        if type_str == "bool":
            return n % 2 == 0
        if type_str == "float64":
            return sign * (n + 0.25)  # exact in binary
        if type_str == "string":
            return f"s{n}-ñ€😀"  # 1-, 2-, 3- and 4-byte UTF-8 sequences
        if type_str in ("bytes", "records"):
            return bytes([n % 256, 0, 255]) + "ü".encode()
        if type_str == "uuid":
            return uuid.UUID(int=(n * 0x9E3779B97F4A7C15) % 2**128 or 1)
        if type_str == "bitfield":  # kafka-python's view of int32 authorized-operations
            return {n % 30, 31}  # bit 31 set -> negative int32 on the wire
        raise AssertionError(f"no generator for JSON type {type_str!r}")

    def fields(self, fields: dict[str, Any], version: int, flexible: bool) -> dict[str, Any]:
        untagged, tagged = _split_fields(fields, version, flexible)
        values = {f.name: self.value(f, version, flexible) for f in untagged}
        if not self.nulls:  # tagged fields: only in the "values" variant
            values.update({f.name: self.value(f, version, flexible) for f in tagged})
        return values

    def value(self, f: Any, version: int, flexible: bool) -> Any:
        if self.nulls and f.nullable_for_version_q(version):
            return None
        if f.is_struct_array():
            return [self.struct(f, version, flexible) for _ in range(2)]
        if f.is_struct():
            return self.struct(f, version, flexible)
        if f.is_array():
            return [self.scalar(f.array_of.type_str) for _ in range(3)]
        if self.nulls and f.type_str == "bitfield":
            return None  # kafka-python's "not requested" == INT32_MIN on the wire
        return self.scalar(f.type_str)

    def struct(self, f: Any, version: int, flexible: bool) -> Any:
        return f.data_class(version=version, **self.fields(f.fields, version, flexible))


def kp_encode(obj: Any, version: int) -> bytes:
    # Objects from kafka-python's (compiled) decode carry their version but an
    # unset _header slot, which encode(version=...) (or DeleteTopicsRequest's
    # encode override) reads: fill it, and rely on .version.
    assert obj.version == version
    if not hasattr(obj, "_header"):
        obj._header = None
    return bytes(obj.encode(header=False, framed=False))
