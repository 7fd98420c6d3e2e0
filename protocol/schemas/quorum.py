"""The KRaft quorum and its features, answered as a one-node Kafka 4.3 cluster answers them:
DescribeQuorum (55), UpdateFeatures (57), UnregisterBroker (64), AddRaftVoter (80),
RemoveRaftVoter (81)."""

from __future__ import annotations

from kgroupd.protocol.codec import BOOL, INT8, INT16, INT32, INT64, STRING, UINT16, UUID, F, Message

DESCRIBE_QUORUM_REQUEST = Message(
    "DescribeQuorumRequest",
    55,
    "0-2",
    "0+",
    [F("topics", [F("topic_name", STRING), F("partitions", [F("partition_index", INT32)])])],
)

_REPLICA_STATE = [
    F("replica_id", INT32),
    F("replica_directory_id", UUID, "2+"),
    F("log_end_offset", INT64),
    F("last_fetch_timestamp", INT64, "1+", default=-1),
    F("last_caught_up_timestamp", INT64, "1+", default=-1),
]

DESCRIBE_QUORUM_RESPONSE = Message(
    "DescribeQuorumResponse",
    55,
    "0-2",
    "0+",
    [
        F("error_code", INT16),
        F("error_message", STRING, "2+", nullable="2+"),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, "2+", nullable="2+"),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                        F("high_watermark", INT64),
                        F("current_voters", list(_REPLICA_STATE)),
                        F("observers", list(_REPLICA_STATE)),
                    ],
                ),
            ],
        ),
        F(
            "nodes",
            [
                F("node_id", INT32, "2+"),
                F(
                    "listeners",
                    [F("name", STRING, "2+"), F("host", STRING, "2+"), F("port", UINT16, "2+")],
                    "2+",
                ),
            ],
            "2+",
        ),
    ],
)

UPDATE_FEATURES_REQUEST = Message(
    "UpdateFeaturesRequest",
    57,
    "0-2",
    "0+",
    [
        F("timeout_ms", INT32, default=60000),
        F(
            "feature_updates",
            [
                F("feature", STRING),
                F("max_version_level", INT16),
                F("allow_downgrade", BOOL, "0"),
                F("upgrade_type", INT8, "1+", default=1),
            ],
        ),
        F("validate_only", BOOL, "1+", default=False),
    ],
)

UPDATE_FEATURES_RESPONSE = Message(
    "UpdateFeaturesResponse",
    57,
    "0-2",
    "0+",
    [
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "results",
            [
                F("feature", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ],
            "0-1",
        ),
    ],
)

UNREGISTER_BROKER_REQUEST = Message(
    "UnregisterBrokerRequest", 64, "0", "0+", [F("broker_id", INT32)]
)

_ERROR_ANSWER = [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
]

UNREGISTER_BROKER_RESPONSE = Message("UnregisterBrokerResponse", 64, "0", "0+", _ERROR_ANSWER)

ADD_RAFT_VOTER_REQUEST = Message(
    "AddRaftVoterRequest",
    80,
    "0-1",
    "0+",
    [
        F("cluster_id", STRING, nullable="0+"),
        F("timeout_ms", INT32),
        F("voter_id", INT32),
        F("voter_directory_id", UUID),
        F("listeners", [F("name", STRING), F("host", STRING), F("port", UINT16)]),
        F("ack_when_committed", BOOL, "1+", default=True),
    ],
)

ADD_RAFT_VOTER_RESPONSE = Message("AddRaftVoterResponse", 80, "0-1", "0+", _ERROR_ANSWER)

REMOVE_RAFT_VOTER_REQUEST = Message(
    "RemoveRaftVoterRequest",
    81,
    "0",
    "0+",
    [
        F("cluster_id", STRING, nullable="0+"),
        F("voter_id", INT32),
        F("voter_directory_id", UUID),
    ],
)

REMOVE_RAFT_VOTER_RESPONSE = Message("RemoveRaftVoterResponse", 81, "0", "0+", _ERROR_ANSWER)

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {
    55: (DESCRIBE_QUORUM_REQUEST, DESCRIBE_QUORUM_RESPONSE),
    57: (UPDATE_FEATURES_REQUEST, UPDATE_FEATURES_RESPONSE),
    64: (UNREGISTER_BROKER_REQUEST, UNREGISTER_BROKER_RESPONSE),
    80: (ADD_RAFT_VOTER_REQUEST, ADD_RAFT_VOTER_RESPONSE),
    81: (REMOVE_RAFT_VOTER_REQUEST, REMOVE_RAFT_VOTER_RESPONSE),
}
