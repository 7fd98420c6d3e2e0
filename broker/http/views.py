"""What ``/api/groups``, ``/api/groups/{id}`` and ``/api/topics`` answer: the facts
``kgroupd groups describe`` and ``kgroupd topics describe`` show, read from the broker's state
on the event loop (nothing else may touch it) as plain JSON-ready dicts."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from kgroupd.broker.coordinator.consumer.group import ConsumerGroup
from kgroupd.broker.coordinator.group import ClassicGroup
from kgroupd.broker.http.share_views import share_group_ids, share_group_view

if TYPE_CHECKING:
    from kgroupd.broker.coordinator.shard import CoordinatorShard
    from kgroupd.broker.state import Broker

TopicPartition = tuple[str, int]


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The topic partitions of a ConsumerProtocol Assignment (any version; a member of a
    group whose protocol type is not ``consumer`` has none to show)."""
    out: list[TopicPartition] = []
    if len(data) < 6:
        return out
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
            out.extend((topic, p) for p in struct.unpack_from(f">{max(parts, 0)}i", data, pos))
            pos += 4 * max(parts, 0)
    except (struct.error, UnicodeDecodeError):
        return out
    return out


class Owner:
    """A member as the rebalance timeline names it."""

    __slots__ = ("client_id", "instance_id", "member_id")

    def __init__(self, member_id: str, client_id: str, instance_id: str | None) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.instance_id = instance_id

    @property
    def key(self) -> str:
        """Who owns a partition across rebalances: a static member by its instance id."""
        return self.instance_id or self.member_id

    def json(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "client_id": self.client_id,
            "instance_id": self.instance_id,
        }


def find_group(broker: Broker, group_id: str) -> ClassicGroup | ConsumerGroup | None:
    shard = broker.coordinator.shard_for(group_id)
    if not shard.owned or shard.loading:
        return None
    return shard.groups.get(group_id) or shard.consumer_groups.get(group_id)


def assignment(broker: Broker, group: ClassicGroup | ConsumerGroup) -> dict[TopicPartition, Owner]:
    """Each assigned partition's owner."""
    out: dict[TopicPartition, Owner] = {}
    if isinstance(group, ClassicGroup):
        for m in group.members.values():
            owner = Owner(m.member_id, m.client_id, m.group_instance_id)
            if group.protocol_type == "consumer":
                for tp in decode_assignment(m.assignment):
                    out[tp] = owner
        return out
    for cm in group.members.values():
        owner = Owner(cm.member_id, cm.client_id, cm.instance_id)
        for topic_id, parts in cm.assigned.items():
            topic = broker.topics.by_id(topic_id)
            if topic is not None:
                for p in parts:
                    out[(topic.name, p)] = owner
    return out


def _members(broker: Broker, group: ClassicGroup | ConsumerGroup) -> list[dict[str, Any]]:
    owned: dict[str, list[TopicPartition]] = {}
    for tp, owner in assignment(broker, group).items():
        owned.setdefault(owner.member_id, []).append(tp)
    rows = []
    if isinstance(group, ClassicGroup):
        people = [
            (m.member_id, m.client_id, m.client_host, m.group_instance_id)
            for m in group.members.values()
        ]
    else:
        people = [
            (m.member_id, m.client_id, m.client_host, m.instance_id) for m in group.members.values()
        ]
    for member_id, client_id, host, instance_id in people:
        rows.append(
            {
                "member_id": member_id,
                "client_id": client_id,
                "host": host,
                "instance_id": instance_id,
                "partitions": [
                    {"topic": t, "partition": p} for t, p in sorted(owned.get(member_id, ()))
                ],
            }
        )
    return rows


def _offsets(
    broker: Broker, shard: CoordinatorShard, group_id: str, owners: dict[TopicPartition, Owner]
) -> list[dict[str, Any]]:
    """One row per committed or assigned partition (kafka-consumer-groups' describe)."""
    committed = shard.offsets.get(group_id, {})
    keys = {(t, p) for t, parts in committed.items() for p in parts} | set(owners)
    rows = []
    for topic, partition in sorted(keys):
        found = committed.get(topic, {}).get(partition)
        offset = found[0] if found is not None else None
        log = broker.topics.partition(topic, partition)
        end = log.high_watermark if log is not None else None
        lag = max(end - offset, 0) if end is not None and offset is not None else None
        owner = owners.get((topic, partition))
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "committed": offset,
                "log_end": end,
                "lag": lag,
                "member_id": owner.member_id if owner else None,
                "client_id": owner.client_id if owner else None,
            }
        )
    return rows


def group_view(broker: Broker, group_id: str) -> dict[str, Any] | None:
    """A group as ``groups describe --members --offsets --state`` shows it; None: unknown."""
    group = find_group(broker, group_id)
    if group is None:
        return share_group_view(broker, group_id)
    shard = broker.coordinator.shard_for(group_id)
    owners = assignment(broker, group)
    if isinstance(group, ClassicGroup):
        head: dict[str, Any] = {
            "group": group_id,
            "type": "classic",
            "state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol": group.protocol_name or "",
            "generation": group.generation_id,
            "leader": group.leader_id,
        }
    else:
        head = {
            "group": group_id,
            "type": "consumer",
            "state": group.state.value,
            "protocol_type": "consumer",
            "protocol": group.assignor_name,
            "generation": group.group_epoch,
            "leader": None,
        }
    offsets = _offsets(broker, shard, group_id, owners)
    head["members"] = _members(broker, group)
    head["offsets"] = offsets
    head["lag"] = sum(row["lag"] or 0 for row in offsets)
    return head


def groups_view(broker: Broker) -> list[dict[str, Any]]:
    """Every group the coordinator has loaded, sorted by id."""
    ids: list[str] = []
    for shard in broker.coordinator.shards:
        if shard.owned and not shard.loading:
            ids.extend(shard.groups)
            ids.extend(shard.consumer_groups)
    ids.extend(share_group_ids(broker))
    out = []
    for gid in sorted(ids):
        view = group_view(broker, gid)
        if view is not None:
            out.append(view)
    return out


def topics_view(broker: Broker) -> list[dict[str, Any]]:
    """Every topic (internal ones flagged) with its partitions' log start and end."""
    out = []
    named = [(name, t, False) for name, t in broker.topics.topics.items()]
    named += [(name, t, True) for name, t in broker.topics.internal.items()]
    for name, topic, internal in sorted(named, key=lambda row: row[0]):
        out.append(
            {
                "topic": name,
                "topic_id": str(topic.topic_id),
                "internal": internal,
                "partitions": [
                    _partition(broker, name, index) for index in range(len(topic.partitions))
                ],
            }
        )
    return out


def _partition(broker: Broker, topic: str, index: int) -> dict[str, Any]:
    log = broker.topics.partition(topic, index)  # an internal one is brought up to date
    assert log is not None
    return {"partition": index, "log_start": log.log_start_offset, "log_end": log.high_watermark}
