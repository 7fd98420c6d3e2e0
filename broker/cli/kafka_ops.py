"""What the tools ask a cluster, one function per question, on ``AdminClient``.

Answers come back as plain data (dicts and dataclasses); the commands in ``groups`` and
``topics`` decide what to print.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kgroupd.protocol.errors import ErrorCode

from .client import AdminClient, KafkaError, check

LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 2, 8, 9
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
CONSUMER_GROUP_DESCRIBE = 69
EARLIEST, LATEST = -2, -1

TopicPartition = tuple[str, int]


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None = None
    assignment: list[TopicPartition] = field(default_factory=list)


@dataclass
class Group:
    group_id: str
    state: str  # as the broker names it: "Stable", "Empty", "Dead"; "stable"... for KIP-848
    protocol_type: str = "consumer"
    type: str = "classic"
    members: list[Member] = field(default_factory=list)

    @property
    def inactive(self) -> bool:
        return self.state.lower() in ("empty", "dead")


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The topic partitions of a ConsumerProtocol Assignment (any version)."""
    if len(data) < 6:
        return []
    out: list[TopicPartition] = []
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(count, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (parts,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for p in struct.unpack_from(f">{max(parts, 0)}i", data, pos):
                out.append((topic, p))
            pos += 4 * max(parts, 0)
    except (struct.error, UnicodeDecodeError):
        return out
    return out


# --- groups -------------------------------------------------------------------------------


async def list_groups(
    admin: AdminClient, states: list[str] | None = None, types: list[str] | None = None
) -> list[dict[str, str]]:
    """Every group on every broker: group, state, type, protocol_type."""
    found: dict[str, dict[str, str]] = {}
    for conn in await admin.all_nodes():
        body = {"states_filter": states or [], "types_filter": types or []}
        version, resp = await conn.request(LIST_GROUPS, body)
        check(resp["error_code"])
        for g in resp["groups"]:
            found[g["group_id"]] = {
                "group": g["group_id"],
                "state": g["group_state"] if version >= 4 else "",
                "type": (g["group_type"] or "classic").lower() if version >= 5 else "",
                "protocol_type": g["protocol_type"],
            }
    out = []
    for row in sorted(found.values(), key=lambda r: r["group"]):
        if row["protocol_type"] not in ("consumer", ""):
            continue  # connect workers, share groups... (Kafka's tool lists consumer groups)
        if row["state"] == "" and states:
            row["state"] = (await describe_group(admin, row["group"])).state
        if row["type"] == "" and types:
            row["type"] = (await describe_group(admin, row["group"])).type
        if states and row["state"].lower() not in {s.lower() for s in states}:
            continue
        if types and row["type"] not in {t.lower() for t in types}:
            continue
        out.append(row)
    return out


async def describe_group(admin: AdminClient, group: str) -> Group:
    """A group with its members (state "Dead" when the coordinator does not know it)."""
    _, resp = await admin.group_request(
        group,
        DESCRIBE_GROUPS,
        {"groups": [group], "include_authorized_operations": False},
        lambda v, r: r["groups"][0]["error_code"],
    )
    g = resp["groups"][0]
    if g["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        conn = await admin.coordinator(group)
        if conn.supports(CONSUMER_GROUP_DESCRIBE):
            consumer = await _describe_consumer_group(admin, group)
            if consumer is not None:
                return consumer
        return Group(group, "Dead")
    check(g["error_code"], g.get("error_message"))
    members = [
        Member(
            m["member_id"],
            m["client_id"],
            m["client_host"],
            m.get("group_instance_id"),
            decode_assignment(bytes(m["member_assignment"] or b"")),
        )
        for m in g["members"]
    ]
    return Group(group, g["group_state"], g["protocol_type"], "classic", members)


async def _describe_consumer_group(admin: AdminClient, group: str) -> Group | None:
    _, resp = await admin.group_request(
        group,
        CONSUMER_GROUP_DESCRIBE,
        {"group_ids": [group], "include_authorized_operations": False},
        lambda v, r: r["groups"][0]["error_code"],
    )
    g = resp["groups"][0]
    if g["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    check(g["error_code"], g.get("error_message"))
    members = []
    for m in g["members"]:
        assigned = [
            (tp["topic_name"], p)
            for tp in (m["assignment"] or {}).get("topic_partitions", [])
            for p in tp["partitions"]
        ]
        members.append(
            Member(m["member_id"], m["client_id"], m["client_host"], m.get("instance_id"), assigned)
        )
    return Group(group, g["group_state"], "consumer", "consumer", members)


async def committed_offsets(admin: AdminClient, group: str) -> dict[TopicPartition, int]:
    """The group's committed offsets (partitions without one left out)."""

    def error_of(version: int, resp: dict[str, Any]) -> int:
        return int(resp["groups"][0]["error_code"] if version >= 8 else resp["error_code"])

    body = {
        "group_id": group,
        "topics": None,
        "groups": [{"group_id": group, "topics": None}],
        "require_stable": False,
    }
    version, resp = await admin.group_request(group, OFFSET_FETCH, body, error_of)
    check(error_of(version, resp))
    topics = resp["groups"][0]["topics"] if version >= 8 else resp["topics"]
    out: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t["partitions"]:
            if p["error_code"] not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise KafkaError(p["error_code"], f"{t['name']}-{p['partition_index']}")
            if p["error_code"] == 0 and p["committed_offset"] >= 0:
                out[(t["name"], p["partition_index"])] = p["committed_offset"]
    return out


async def commit_offsets(
    admin: AdminClient, group: str, offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Commit as an admin (generation -1, no member): each partition's error code."""
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, part), offset in sorted(offsets.items()):
        by_topic[topic].append(
            {
                "partition_index": part,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "commit_timestamp": -1,
                "committed_metadata": "",
            }
        )
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }

    def error_of(version: int, resp: dict[str, Any]) -> int:
        codes = [p["error_code"] for t in resp["topics"] for p in t["partitions"]]
        return next((c for c in codes if c in (14, 15, 16)), 0)

    _, resp = await admin.group_request(group, OFFSET_COMMIT, body, error_of)
    return {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in resp["topics"]
        for p in t["partitions"]
    }


async def delete_offsets(
    admin: AdminClient, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
    for topic, part in sorted(partitions):
        by_topic[topic].append({"partition_index": part})
    body = {
        "group_id": group,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    _, resp = await admin.group_request(group, OFFSET_DELETE, body, lambda v, r: r["error_code"])
    check(resp["error_code"])
    return {
        (t["name"], p["partition_index"]): p["error_code"]
        for t in resp["topics"]
        for p in t["partitions"]
    }


async def delete_group(admin: AdminClient, group: str) -> int:
    """DeleteGroups for one group: its error code."""
    _, resp = await admin.group_request(
        group, DELETE_GROUPS, {"groups_names": [group]}, lambda v, r: r["results"][0]["error_code"]
    )
    return int(resp["results"][0]["error_code"])


# --- topics and offsets in the log --------------------------------------------------------


async def partitions_of(admin: AdminClient, topics: list[str]) -> dict[str, list[int]]:
    """Each topic's partitions (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist)."""
    resp = await admin.metadata(topics)
    out: dict[str, list[int]] = {}
    for t in resp["topics"]:
        check(t["error_code"], f"topic {t['name']}")
        out[t["name"]] = sorted(p["partition_index"] for p in t["partitions"])
    return out


async def list_offsets(
    admin: AdminClient, partitions: list[TopicPartition], timestamp: int
) -> dict[TopicPartition, int]:
    """ListOffsets at ``timestamp`` (EARLIEST, LATEST or ms), asked of each leader; -1 where
    no record has a timestamp at or after it."""
    if not partitions:
        return {}
    topics = sorted({t for t, _ in partitions})
    meta = await admin.metadata(topics)
    leaders: dict[TopicPartition, int] = {}
    for t in meta["topics"]:
        check(t["error_code"], f"topic {t['name']}")
        for p in t["partitions"]:
            leaders[(t["name"], p["partition_index"])] = p["leader_id"]
    by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for tp in partitions:
        if tp not in leaders:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]}")
        by_leader[leaders[tp]][tp[0]].append(tp[1])
    out: dict[TopicPartition, int] = {}
    for leader, parts in by_leader.items():
        conn = await admin.node(leader)
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                        for p in ps
                    ],
                }
                for topic, ps in parts.items()
            ],
        }
        _, resp = await conn.request(LIST_OFFSETS, body)
        for t in resp["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"{t['name']}-{p['partition_index']}")
                out[(t["name"], p["partition_index"])] = p["offset"]
    return out
