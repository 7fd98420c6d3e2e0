"""Share groups (KIP-932) on simulated nodes (``--nodes N``, N > 1; the connections are
``kgroupd.broker.net.nodes``).

In Kafka each broker keeps its own share sessions (a consumer opens one with every leader of
its partitions, each with its own epochs), and a share partition lives on its leader. kgroupd
keeps one share-session table for the process, keyed by (group, member), so on a node a
ShareFetch / ShareAcknowledge works under the member id ``<member>@<node id>``: one session
per node, as in Kafka, and what a member acquired through a node is held by that name. Such a
session ends with the connection that opened it (what it holds released at once), and each
node's sessions count against ``--group-share-max-share-sessions`` on their own, as each Kafka
broker bounds its own ShareSessionCache.

- A ShareFetch / ShareAcknowledge naming partitions this node does not lead goes on without
  them; they are answered NOT_LEADER_OR_FOLLOWER (their acknowledgements too), with the current
  leader and its endpoint (``node_endpoints``), as Kafka answers them.
- When leaderships move (a node down or up), what a member holds through a node that no longer
  leads the partition is available again at once (Kafka's new leader starts the partition from
  its persisted state, where acquired records are available), and the sessions of a node that
  went down end. A live node's session loses the partitions it no longer leads (a share fetch
  waiting there does not take their records); its next request answers them
  NOT_LEADER_OR_FOLLOWER, so the client moves them to their leader. A member the coordinator
  removes loses what it holds through every node.

The routing of the share-group coordinator APIs (ShareGroupHeartbeat, ShareGroupDescribe,
the share-group offsets) is that of the other group APIs, in ``kgroupd.broker.net.nodes``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kgroupd.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kgroupd.broker.nodes import Nodes
    from kgroupd.broker.share.service import ShareService
    from kgroupd.broker.state import Broker
    from kgroupd.protocol.messages import MessageSpec

__all__ = ["PASS_REWRITTEN", "Amend", "node_member", "node_of", "share_check", "share_parked"]

Fields = dict[str, Any]
NOT_LEADER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
SHARE_FETCH = 78

PASS_REWRITTEN = b"pass"  # a check's marker: go on with the request as the check changed it


@dataclass(slots=True)
class Amend:
    """A check's answer: go on with the request as the check changed it, then pass the
    response's fields through ``fix`` (it adds what the check took out)."""

    fix: Callable[[Fields], None]


class Conn(Protocol):
    """What the checks read of a node's connection (``NodeConnection``)."""

    node_id: int
    nodes: Nodes
    advertised: tuple[str, int]

    @property
    def broker(self) -> Broker: ...


def node_member(member_id: str, node_id: int) -> str:
    """The name a member's share session and holdings have on a node."""
    return f"{member_id}@{node_id}"


def node_of(member_id: str) -> str:
    """The node whose session cache a (renamed) member's share session is in."""
    return member_id.rpartition("@")[2]


def share_check(conn: Conn, spec: MessageSpec, req: Fields) -> bytes | Amend | None:
    """ShareFetch / ShareAcknowledge on a node: the member's session on this node; the
    partitions led elsewhere answered NOT_LEADER_OR_FOLLOWER."""
    nodes, me, broker = conn.nodes, conn.node_id, conn.broker
    _hook(broker, nodes)
    if req["member_id"]:
        req["member_id"] = node_member(req["member_id"], me)
    by_id = broker.topics.by_id
    refused: list[tuple[uuid.UUID, int, int, int, bool]] = []
    kept = []
    for t in req["topics"]:
        topic = by_id(t["topic_id"])
        if topic is None:  # the handler answers UNKNOWN_TOPIC_ID
            kept.append(t)
            continue
        mine = []
        for p in t["partitions"]:
            index = p["partition_index"]
            leader = nodes.leader(index)
            if leader == me:
                mine.append(p)
            else:
                epoch = nodes.epoch(topic.name, index)
                refused.append(
                    (t["topic_id"], index, leader, epoch, bool(p["acknowledgement_batches"]))
                )
        if mine:
            t["partitions"] = mine
            kept.append(t)
    away = nodes.moved_away.pop((req["group_id"], req["member_id"]), None)
    if away and req["share_session_epoch"] != 0:
        # taken from the session by a leadership move: the client learns of it now (a new
        # session, at epoch 0, names its partitions afresh)
        named = {(tid, index) for tid, index, *_ in refused}
        for tid, index in sorted(away - named):
            topic = by_id(tid)
            if topic is not None and nodes.leader(index) != me:
                refused.append(
                    (tid, index, nodes.leader(index), nodes.epoch(topic.name, index), False)
                )
    if not refused:
        return PASS_REWRITTEN
    req["topics"] = kept
    fetch = spec.api_key == SHARE_FETCH
    endpoints = nodes.brokers(conn.advertised)

    def fix(body: Fields) -> None:
        if body.get("error_code"):  # a session error: no partitions answered
            return
        responses = body.setdefault("responses", [])
        topics = {r["topic_id"]: r for r in responses}
        leaders = set()
        for topic_id, index, leader, epoch, acked in refused:
            entry: Fields = {
                "partition_index": index,
                "error_code": NOT_LEADER,
                "current_leader": {"leader_id": leader, "leader_epoch": epoch},
            }
            if fetch:
                entry.update(
                    acknowledge_error_code=NOT_LEADER if acked else 0,
                    records=b"",
                    acquired_records=[],
                )
            found = topics.get(topic_id)
            if found is None:
                found = topics[topic_id] = {"topic_id": topic_id, "partitions": []}
                responses.append(found)
            found["partitions"].append(entry)
            leaders.add(leader)
        listed = body.setdefault("node_endpoints", [])
        have = {e["node_id"] for e in listed}
        listed.extend(
            {"node_id": n, "host": h, "port": port, "rack": None}
            for n, h, port in endpoints
            if n in leaders and n not in have
        )

    return Amend(fix)


def share_parked(conn: Conn, spec: MessageSpec, req: Fields) -> bytes | None:
    """A ShareFetch waiting for records on this node (``req`` as ``share_check`` left it),
    looked at again after leaderships moved: when its session lost partitions it is answered
    now, with them NOT_LEADER_OR_FOLLOWER (it acquired nothing yet; its epoch has moved on)."""
    nodes = conn.nodes
    away = nodes.moved_away.pop((req["group_id"], req["member_id"]), None)
    if not away:
        return None
    by_id = conn.broker.topics.by_id
    responses: dict[uuid.UUID, list[Fields]] = {}
    leaders = set()
    for tid, index in sorted(away):
        topic = by_id(tid)
        if topic is None:
            continue
        leader = nodes.leader(index)
        leaders.add(leader)
        responses.setdefault(tid, []).append(
            {
                "partition_index": index,
                "error_code": NOT_LEADER,
                "records": b"",
                "current_leader": {
                    "leader_id": leader,
                    "leader_epoch": nodes.epoch(topic.name, index),
                },
            }
        )
    share = conn.broker.share
    return spec.encode_response(
        {
            "error_code": 0,
            "acquisition_lock_timeout_ms": share.lock_duration_ms(req["group_id"] or ""),
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in responses.items()],
            "node_endpoints": [
                {"node_id": n, "host": h, "port": port, "rack": None}
                for n, h, port in nodes.brokers(conn.advertised)
                if n in leaders
            ],
        }
    )


class _Removed:
    """The share coordinator removed a member: it loses its sessions on every node too."""

    def __init__(self, inner: Callable[[str, str], None], share: ShareService, ids: list[int]):
        self.inner = inner
        self.share = share
        self.ids = ids

    def __call__(self, group_id: str, member_id: str) -> None:
        self.inner(group_id, member_id)
        for node in self.ids:
            self.share.member_gone(group_id, node_member(member_id, node))


def _hook(broker: Broker, nodes: Nodes) -> None:
    share = broker.share
    coordinator = share.coordinator
    if isinstance(coordinator.on_member_removed, _Removed):
        return
    coordinator.on_member_removed = _Removed(coordinator.on_member_removed, share, nodes.ids)
    share.cache_of = node_of
    nodes.on_moved.append(lambda: release_moved(share, nodes))


def release_moved(share: ShareService, nodes: Nodes) -> None:
    """After leaderships moved: the sessions of a node that is down end (what they hold is
    available again); what a session holds in a partition its node no longer leads too.
    What was taken from a session that has ended since (its connection closed) is forgotten."""
    for key in [k for k in nodes.moved_away if k not in share.sessions]:
        del nodes.moved_away[key]
    for group_id, member_id in list(share.sessions):
        _, at, node = member_id.rpartition("@")
        if not at or not node.isdigit():
            continue
        node_id = int(node)
        if node_id in nodes.down:
            share.member_gone(group_id, member_id)
            nodes.moved_away.pop((group_id, member_id), None)
            continue
        session = share.sessions[group_id, member_id]
        taken = nodes.moved_away.get((group_id, member_id), set())
        back = {tp for tp in taken if nodes.leader(tp[1]) == node_id}
        if back:  # led here again before the client heard: still in its session
            taken -= back
            session.partitions.update(back)
        away = {tp for tp in session.partitions if nodes.leader(tp[1]) != node_id}
        if away:  # a fetch waiting on this node does not take their records
            session.partitions.difference_update(away)
            taken |= away
        if taken:
            nodes.moved_away[group_id, member_id] = taken
        else:
            nodes.moved_away.pop((group_id, member_id), None)
        for (group, _topic_id, index), sp in list(share.partitions.items()):
            if group == group_id and nodes.leader(index) != node_id:
                sp.release_member(member_id)
