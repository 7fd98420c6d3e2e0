"""Share groups (KIP-932) as ``/api/groups`` and the live page show them: the group's members
with their assigned partitions, and per share partition the start offset, the log end, the lag
(Kafka's: what is left to deliver) and the in-flight records by state with their delivery
counts. Read on the event loop, as the other views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kgroupd.broker.share.partition import RecordState

if TYPE_CHECKING:
    from kgroupd.broker.state import Broker


def share_group_ids(broker: Broker) -> list[str]:
    return list(broker.share.coordinator.groups)


def share_group_view(broker: Broker, group_id: str) -> dict[str, Any] | None:
    share = broker.share
    group = share.coordinator.groups.get(group_id)
    if group is None:
        return None
    topics = broker.topics
    members = []
    for m in group.members.values():
        parts: list[dict[str, Any]] = []
        for topic_id, ps in m.assignment:
            topic = topics.by_id(topic_id)
            if topic is not None:
                parts.extend({"topic": topic.name, "partition": p} for p in ps)
        members.append(
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.client_host,
                "instance_id": None,
                "member_epoch": m.member_epoch,
                "subscribed": list(m.subscribed_topic_names),
                "partitions": sorted(parts, key=lambda r: (r["topic"], r["partition"])),
            }
        )
    rows = []
    for (g, topic_id, index), sp in share.partitions.items():
        topic = topics.by_id(topic_id) if g == group_id else None
        if topic is None or index >= len(topic.partitions):
            continue
        log = topic.partitions[index]
        states = sp.state_counts()
        counts = sp.delivery_counts()
        settled = states[RecordState.ACKNOWLEDGED] + states[RecordState.ARCHIVED]
        lag = max(0, log.high_watermark - max(sp.start_offset, log.log_start_offset) - settled)
        rows.append(
            {
                "topic": topic.name,
                "partition": index,
                "committed": sp.start_offset,  # the share-partition start offset
                "start_offset": sp.start_offset,
                "log_end": log.high_watermark,
                "lag": lag,
                "member_id": None,
                "client_id": None,
                "in_flight": sp.in_flight_count(),
                "acquired": states[RecordState.ACQUIRED],
                "available": states[RecordState.AVAILABLE],
                "acknowledged": states[RecordState.ACKNOWLEDGED],
                "archived": states[RecordState.ARCHIVED],
                # in-flight records by delivery count ({"1": n, "2": m, ...})
                "delivery_counts": {str(k): v for k, v in sorted(counts.items())},
            }
        )
    rows.sort(key=lambda r: (r["topic"], r["partition"]))
    return {
        "group": group_id,
        "type": "share",
        "state": group.state.value,
        "protocol_type": "share",
        "protocol": "simple",
        "generation": group.group_epoch,
        "leader": None,
        "members": members,
        "offsets": rows,
        "lag": sum(r["lag"] for r in rows),
    }
