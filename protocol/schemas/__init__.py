"""Wire definitions of every API the broker serves.

``SERVED``
    ``api_key -> (min_version, max_version)``: the one table of served ranges. ApiVersions
    advertises exactly what the handler registry derives from it.
``DEFINITIONS``
    ``api_key -> (request Message, response Message)``: our own field trees
    (``kgroupd.protocol.codec``), one per API covering every served version. It also holds APIs
    defined ahead of their handlers (the transaction APIs of issue 11): those cover every
    stable version of Kafka 4.3's message JSON and stay out of ``SERVED``, so the broker
    neither advertises nor decodes them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgroupd.protocol.codec import Message

# The one table of served version ranges: for every API, Kafka 4.3's latest stable version
# (its message JSON, honouring latestVersionUnstable), and the lower of Kafka 4.3's oldest and
# the oldest kgroupd served before (Kafka 4 dropped old versions, KIP-896; we keep them).
# tests/broker/test_registry.py checks ApiVersions against exactly this table.
SERVED: dict[int, tuple[int, int]] = {
    0: (0, 13),  # Produce (v0-v2 advertised but refused, as Kafka 4 does)
    1: (4, 18),  # Fetch
    2: (0, 11),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (0, 10),  # OffsetCommit
    9: (0, 10),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId (v6 is latestVersionUnstable in Kafka 4.3)
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    28: (0, 5),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (1, 2),  # AlterReplicaLogDirs
    35: (1, 5),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (1, 3),  # CreateDelegationToken
    39: (1, 2),  # RenewDelegationToken
    40: (1, 2),  # ExpireDelegationToken
    41: (1, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    55: (0, 2),  # DescribeQuorum
    57: (0, 2),  # UpdateFeatures
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker
    65: (0, 0),  # DescribeTransactions
    60: (0, 2),  # DescribeCluster
    66: (0, 2),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
    71: (0, 0),  # GetTelemetrySubscriptions
    72: (0, 0),  # PushTelemetry
    74: (0, 1),  # ListConfigResources
    75: (0, 0),  # DescribeTopicPartitions
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 2),  # ShareFetch
    79: (1, 2),  # ShareAcknowledge
    80: (0, 1),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
    90: (0, 1),  # DescribeShareGroupOffsets
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
}

# api_key -> the module of this package that defines it (its ``DEFINITIONS``). A module is
# imported when one of its APIs is first asked for: building the field trees of every API
# at start-up took longer than the rest of the protocol package (tests/protocol check this
# table against the modules).
HOMES: dict[int, str] = {
    18: "api_versions",
    3: "metadata",
    **dict.fromkeys((19, 20, 21, 32, 33, 37, 44, 74), "admin"),
    **dict.fromkeys((0, 22), "produce"),
    1: "fetch",
    2: "list_offsets",
    **dict.fromkeys((10, 11, 12, 13, 14, 15, 16, 42), "groups"),
    **dict.fromkeys((8, 9, 47), "offsets"),
    **dict.fromkeys((68, 69), "consumer"),
    **dict.fromkeys((17, 36, 50, 51), "security"),
    **dict.fromkeys((29, 30, 31), "acls"),
    # WriteTxnMarkers (27) defined, not served: broker-to-broker
    **dict.fromkeys((24, 25, 26, 27, 28, 61, 65, 66), "txn"),
    **dict.fromkeys((76, 77, 78, 79, 90, 91, 92), "share"),
    **dict.fromkeys((34, 35, 60, 75), "cluster"),
    **dict.fromkeys((48, 49), "quotas"),
    **dict.fromkeys((23, 43, 45, 46), "replication"),
    **dict.fromkeys((71, 72), "telemetry"),
    **dict.fromkeys((38, 39, 40, 41), "tokens"),
    **dict.fromkeys((55, 57, 64, 80, 81), "quorum"),
}


class _Definitions(Mapping[int, "tuple[Message, Message]"]):
    """api_key -> (request, response): the APIs defined with our own field trees, each
    module imported on first use."""

    def __getitem__(self, api_key: int) -> tuple[Message, Message]:
        home = HOMES[api_key]
        found: dict[int, tuple[Message, Message]]
        found = importlib.import_module(f"{__name__}.{home}").DEFINITIONS
        return found[api_key]

    def __contains__(self, api_key: object) -> bool:
        return api_key in HOMES

    def __iter__(self) -> Iterator[int]:
        return iter(HOMES)

    def __len__(self) -> int:
        return len(HOMES)


DEFINITIONS: Mapping[int, tuple[Message, Message]] = _Definitions()

__all__ = [
    "DEFINITIONS",
    "HOMES",
    "SERVED",
]
