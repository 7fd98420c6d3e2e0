"""aiokafka 0.14 classes for the served versions that we do *not* override.

Explicit (not introspected) so that an aiokafka upgrade that renames or drops a
class fails loudly at import time.  ``tests/protocol/test_schemas_crosscheck.py``
checks every entry against Apache Kafka's JSON message definitions.
"""

from __future__ import annotations

from aiokafka.protocol import admin as _admin
from aiokafka.protocol import commit as _commit
from aiokafka.protocol import coordination as _coordination
from aiokafka.protocol import fetch as _fetch
from aiokafka.protocol import group as _group
from aiokafka.protocol import metadata as _metadata
from aiokafka.protocol import offset as _offset
from aiokafka.protocol import produce as _produce
from aiokafka.protocol import transaction as _transaction
from aiokafka.protocol.api import RequestStruct, Response

# fmt: off
AIOKAFKA_MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (3, 0): (_metadata.MetadataRequest_v0, _metadata.MetadataResponse_v0),
    (3, 1): (_metadata.MetadataRequest_v1, _metadata.MetadataResponse_v1),
    (3, 2): (_metadata.MetadataRequest_v2, _metadata.MetadataResponse_v2),
    (3, 3): (_metadata.MetadataRequest_v3, _metadata.MetadataResponse_v3),
    (3, 4): (_metadata.MetadataRequest_v4, _metadata.MetadataResponse_v4),
    (3, 5): (_metadata.MetadataRequest_v5, _metadata.MetadataResponse_v5),
    (19, 0): (_admin.CreateTopicsRequest_v0, _admin.CreateTopicsResponse_v0),
    (19, 1): (_admin.CreateTopicsRequest_v1, _admin.CreateTopicsResponse_v1),
    (19, 2): (_admin.CreateTopicsRequest_v2, _admin.CreateTopicsResponse_v2),
    (19, 3): (_admin.CreateTopicsRequest_v3, _admin.CreateTopicsResponse_v3),
    (20, 0): (_admin.DeleteTopicsRequest_v0, _admin.DeleteTopicsResponse_v0),
    (20, 1): (_admin.DeleteTopicsRequest_v1, _admin.DeleteTopicsResponse_v1),
    (20, 2): (_admin.DeleteTopicsRequest_v2, _admin.DeleteTopicsResponse_v2),
    (20, 3): (_admin.DeleteTopicsRequest_v3, _admin.DeleteTopicsResponse_v3),
    (37, 0): (_admin.CreatePartitionsRequest_v0, _admin.CreatePartitionsResponse_v0),
    (37, 1): (_admin.CreatePartitionsRequest_v1, _admin.CreatePartitionsResponse_v1),
    # Produce v0-v2 are advertised (and refused per partition) as Kafka 4 does: librdkafka
    # before 2.8 only compresses with gzip/snappy/lz4 when the broker lists Produce v0.
    (0, 0): (_produce.ProduceRequest_v0, _produce.ProduceResponse_v0),
    (0, 1): (_produce.ProduceRequest_v1, _produce.ProduceResponse_v1),
    (0, 2): (_produce.ProduceRequest_v2, _produce.ProduceResponse_v2),
    (0, 3): (_produce.ProduceRequest_v3, _produce.ProduceResponse_v3),
    (0, 4): (_produce.ProduceRequest_v4, _produce.ProduceResponse_v4),
    (0, 5): (_produce.ProduceRequest_v5, _produce.ProduceResponse_v5),
    (0, 6): (_produce.ProduceRequest_v6, _produce.ProduceResponse_v6),
    (0, 7): (_produce.ProduceRequest_v7, _produce.ProduceResponse_v7),
    (0, 8): (_produce.ProduceRequest_v8, _produce.ProduceResponse_v8),
    (22, 0): (_transaction.InitProducerIdRequest_v0, _transaction.InitProducerIdResponse_v0),
    (1, 4): (_fetch.FetchRequest_v4, _fetch.FetchResponse_v4),
    (1, 5): (_fetch.FetchRequest_v5, _fetch.FetchResponse_v5),
    (1, 6): (_fetch.FetchRequest_v6, _fetch.FetchResponse_v6),
    (1, 7): (_fetch.FetchRequest_v7, _fetch.FetchResponse_v7),
    (1, 8): (_fetch.FetchRequest_v8, _fetch.FetchResponse_v8),
    (1, 9): (_fetch.FetchRequest_v9, _fetch.FetchResponse_v9),
    (1, 10): (_fetch.FetchRequest_v10, _fetch.FetchResponse_v10),
    (1, 11): (_fetch.FetchRequest_v11, _fetch.FetchResponse_v11),
    (2, 0): (_offset.OffsetRequest_v0, _offset.OffsetResponse_v0),
    (2, 1): (_offset.OffsetRequest_v1, _offset.OffsetResponse_v1),
    (2, 2): (_offset.OffsetRequest_v2, _offset.OffsetResponse_v2),
    (2, 3): (_offset.OffsetRequest_v3, _offset.OffsetResponse_v3),
    (32, 0): (_admin.DescribeConfigsRequest_v0, _admin.DescribeConfigsResponse_v0),
    (32, 1): (_admin.DescribeConfigsRequest_v1, _admin.DescribeConfigsResponse_v1),
    (32, 2): (_admin.DescribeConfigsRequest_v2, _admin.DescribeConfigsResponse_v2),
    (10, 0): (_coordination.FindCoordinatorRequest_v0, _coordination.FindCoordinatorResponse_v0),
    (10, 1): (_coordination.FindCoordinatorRequest_v1, _coordination.FindCoordinatorResponse_v1),
    (11, 0): (_group.JoinGroupRequest_v0, _group.JoinGroupResponse_v0),
    (11, 1): (_group.JoinGroupRequest_v1, _group.JoinGroupResponse_v1),
    (11, 2): (_group.JoinGroupRequest_v2, _group.JoinGroupResponse_v2),
    (11, 5): (_group.JoinGroupRequest_v5, _group.JoinGroupResponse_v5),
    (14, 0): (_group.SyncGroupRequest_v0, _group.SyncGroupResponse_v0),
    (14, 1): (_group.SyncGroupRequest_v1, _group.SyncGroupResponse_v1),
    (14, 3): (_group.SyncGroupRequest_v3, _group.SyncGroupResponse_v3),
    (12, 0): (_group.HeartbeatRequest_v0, _group.HeartbeatResponse_v0),
    (12, 1): (_group.HeartbeatRequest_v1, _group.HeartbeatResponse_v1),
    (13, 0): (_group.LeaveGroupRequest_v0, _group.LeaveGroupResponse_v0),
    (13, 1): (_group.LeaveGroupRequest_v1, _group.LeaveGroupResponse_v1),
    (8, 0): (_commit.OffsetCommitRequest_v0, _commit.OffsetCommitResponse_v0),
    (8, 1): (_commit.OffsetCommitRequest_v1, _commit.OffsetCommitResponse_v1),
    (8, 2): (_commit.OffsetCommitRequest_v2, _commit.OffsetCommitResponse_v2),
    (8, 3): (_commit.OffsetCommitRequest_v3, _commit.OffsetCommitResponse_v3),
    (9, 0): (_commit.OffsetFetchRequest_v0, _commit.OffsetFetchResponse_v0),
    (9, 1): (_commit.OffsetFetchRequest_v1, _commit.OffsetFetchResponse_v1),
    (9, 2): (_commit.OffsetFetchRequest_v2, _commit.OffsetFetchResponse_v2),
    (9, 3): (_commit.OffsetFetchRequest_v3, _commit.OffsetFetchResponse_v3),
    (15, 0): (_admin.DescribeGroupsRequest_v0, _admin.DescribeGroupsResponse_v0),
    (15, 1): (_admin.DescribeGroupsRequest_v1, _admin.DescribeGroupsResponse_v1),
    (15, 2): (_admin.DescribeGroupsRequest_v2, _admin.DescribeGroupsResponse_v2),
    (16, 0): (_admin.ListGroupsRequest_v0, _admin.ListGroupsResponse_v0),
    (16, 1): (_admin.ListGroupsRequest_v1, _admin.ListGroupsResponse_v1),
    (42, 0): (_admin.DeleteGroupsRequest_v0, _admin.DeleteGroupsResponse_v0),
    (42, 1): (_admin.DeleteGroupsRequest_v1, _admin.DeleteGroupsResponse_v1),
}
# fmt: on
