"""Share-group administration on the wire, as Kafka answers it: ShareGroupDescribe,
DescribeShareGroupOffsets (v1: lag), AlterShareGroupOffsets, DeleteShareGroupOffsets, and share
groups in ListGroups (type filter), DescribeGroups and DeleteGroups. A member joins and
acknowledges records with raw ShareGroupHeartbeat / ShareFetch requests."""

from __future__ import annotations

import uuid

from kgroupd.broker.net.server import KafkaServer
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import heartbeat, set_group_config, share_fetch

TOPIC = "admin-sq"
NONE, GROUP_NOT_FOUND, NON_EMPTY, UNKNOWN_TOPIC = 0, 69, 68, 3


async def setup(wire: WireClient, server: KafkaServer, group: str) -> uuid.UUID:
    await create_topic(wire, TOPIC, 2, {})
    for i in range(10):
        await wire.request(0, 8, produce_request(TOPIC, 0, build_batch([(None, b"%d" % i, [])])))
    topic_id = server.broker.topics.get(TOPIC).topic_id  # type: ignore[union-attr]
    await set_group_config(wire, group, "share.auto.offset.reset", "earliest")
    return topic_id


async def test_describe_list_alter_delete(server: KafkaServer) -> None:
    group, member = "admin-g", "m-" + uuid.uuid4().hex[:8]
    async with await WireClient.connect(server.port) as wire:
        topic_id = await setup(wire, server, group)
        joined = await heartbeat(wire, group, member, 0, TOPIC)
        assert joined["error_code"] == NONE
        got = await share_fetch(wire, group, member, 0, topic_id, [])
        (part,) = got["responses"][0]["partitions"]
        assert part["acquired_records"][0]["first_offset"] == 0
        # accept 0-3, release the rest
        acks = [
            {"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]},
            {"first_offset": 4, "last_offset": 9, "acknowledge_types": [2]},
        ]
        got = await share_fetch(wire, group, member, 1, topic_id, acks)
        assert got["responses"][0]["partitions"][0]["acknowledge_error_code"] == NONE

        described = await wire.request(
            77, 1, {"group_ids": [group, "nope"], "include_authorized_operations": True}
        )
        g, missing = described["groups"]
        assert (g["error_code"], g["group_state"], g["assignor_name"]) == (NONE, "Stable", "simple")
        (m,) = g["members"]
        assert m["member_id"] == member and m["subscribed_topic_names"] == [TOPIC]
        assert m["assignment"]["topic_partitions"] == [
            {"topic_id": topic_id, "topic_name": TOPIC, "partitions": [0, 1]}
        ]
        assert g["authorized_operations"] > 0
        assert (missing["error_code"], missing["error_message"]) == (
            GROUP_NOT_FOUND,
            "Group nope not found.",
        )

        offsets = await wire.request(90, 1, {"groups": [{"group_id": group, "topics": None}]})
        (og,) = offsets["groups"]
        assert og["error_code"] == NONE
        (ot,) = og["topics"]
        assert (ot["topic_name"], ot["topic_id"]) == (TOPIC, topic_id)
        # partition 0: started at 0, 4 accepted: start 4, lag 6 (10 - 4); 1 never fetched
        assert [(p["partition_index"], p["start_offset"], p["lag"]) for p in ot["partitions"]] == [
            (0, 4, 6)
        ]
        asked = await wire.request(
            90,
            1,
            {
                "groups": [
                    {
                        "group_id": group,
                        "topics": [
                            {"topic_name": TOPIC, "partitions": [0, 1, 7]},
                            {"topic_name": "nope", "partitions": [0]},
                        ],
                    }
                ]
            },
        )
        t_known, t_unknown = asked["groups"][0]["topics"]
        assert [(p["start_offset"], p["lag"], p["error_code"]) for p in t_known["partitions"]] == [
            (4, 6, NONE),
            (-1, -1, NONE),
            (-1, -1, UNKNOWN_TOPIC),
        ]
        assert t_unknown["partitions"][0]["error_code"] == UNKNOWN_TOPIC

        # share groups in ListGroups, by type
        listed = await wire.request(16, 5, {"states_filter": [], "types_filter": ["Share"]})
        assert [
            (x["group_id"], x["protocol_type"], x["group_state"], x["group_type"])
            for x in listed["groups"]
        ] == [(group, "share", "Stable", "share")]
        classic = await wire.request(16, 5, {"states_filter": [], "types_filter": ["classic"]})
        assert classic["groups"] == []
        every = await wire.request(16, 4, {"states_filter": ["stable"]})
        assert [x["group_id"] for x in every["groups"]] == [group]
        # DescribeGroups describes classic groups: a share group is not one
        dg = await wire.request(15, 6, {"groups": [group], "include_authorized_operations": False})
        assert (dg["groups"][0]["error_code"], dg["groups"][0]["error_message"]) == (
            GROUP_NOT_FOUND,
            f"Group {group} is not a classic group.",
        )
        dg5 = await wire.request(15, 5, {"groups": [group], "include_authorized_operations": False})
        assert (dg5["groups"][0]["error_code"], dg5["groups"][0]["group_state"]) == (NONE, "Dead")

        # while the member is in the group: NON_EMPTY_GROUP
        alter = {
            "group_id": group,
            "topics": [
                {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 2}]}
            ],
        }
        assert (await wire.request(91, 0, alter))["error_code"] == NON_EMPTY
        delete = {"group_id": group, "topics": [{"topic_name": TOPIC}]}
        assert (await wire.request(92, 0, delete))["error_code"] == NON_EMPTY
        assert (await wire.request(42, 2, {"groups_names": [group]}))["results"][0][
            "error_code"
        ] == NON_EMPTY

        assert (await heartbeat(wire, group, member, -1))["error_code"] == NONE
        listed = await wire.request(16, 5, {"states_filter": ["Empty"], "types_filter": []})
        assert [x["group_id"] for x in listed["groups"]] == [group]
        altered = await wire.request(
            91,
            0,
            {
                "group_id": group,
                "topics": [
                    {
                        "topic_name": TOPIC,
                        "partitions": [
                            {"partition_index": 0, "start_offset": 2},
                            {"partition_index": 5, "start_offset": 0},
                        ],
                    },
                    {
                        "topic_name": "nope",
                        "partitions": [{"partition_index": 0, "start_offset": 0}],
                    },
                ],
            },
        )
        assert altered["error_code"] == NONE
        assert [
            [(p["partition_index"], p["error_code"]) for p in t["partitions"]]
            for t in altered["responses"]
        ] == [[(0, NONE), (5, UNKNOWN_TOPIC)], [(0, UNKNOWN_TOPIC)]]
        offsets = await wire.request(90, 0, {"groups": [{"group_id": group, "topics": None}]})
        assert [
            (p["partition_index"], p["start_offset"])
            for p in offsets["groups"][0]["topics"][0]["partitions"]
        ] == [(0, 2)]
        # a new member starts at the altered offset: offsets 2 and 3 again
        member2 = "m-" + uuid.uuid4().hex[:8]
        await heartbeat(wire, group, member2, 0, TOPIC)
        got = await share_fetch(wire, group, member2, 0, topic_id, [])
        assert got["responses"][0]["partitions"][0]["acquired_records"][0]["first_offset"] == 2
        await heartbeat(wire, group, member2, -1)

        deleted = await wire.request(
            92, 0, {"group_id": group, "topics": [{"topic_name": TOPIC}, {"topic_name": "nope"}]}
        )
        assert [(t["topic_name"], t["error_code"]) for t in deleted["responses"]] == [
            (TOPIC, NONE),
            ("nope", UNKNOWN_TOPIC),
        ]
        offsets = await wire.request(90, 0, {"groups": [{"group_id": group, "topics": None}]})
        assert offsets["groups"][0]["topics"] == []

        result = await wire.request(42, 2, {"groups_names": [group, group + "-none"]})
        assert [r["error_code"] for r in result["results"]] == [NONE, GROUP_NOT_FOUND]
        described = await wire.request(
            77, 1, {"group_ids": [group], "include_authorized_operations": False}
        )
        assert described["groups"][0]["error_code"] == GROUP_NOT_FOUND
        # AlterShareGroupOffsets of a group that does not exist makes it (Empty)
        made = await wire.request(
            91,
            0,
            {
                "group_id": "fresh",
                "topics": [
                    {"topic_name": TOPIC, "partitions": [{"partition_index": 1, "start_offset": 0}]}
                ],
            },
        )
        assert made["error_code"] == NONE
        described = await wire.request(
            77, 1, {"group_ids": ["fresh"], "include_authorized_operations": False}
        )
        assert (described["groups"][0]["error_code"], described["groups"][0]["group_state"]) == (
            NONE,
            "Empty",
        )
