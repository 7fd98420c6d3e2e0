"""Simulated nodes (``--nodes N``, N > 1): one process serves N brokers, each on its own port
of each listener; which node leads each partition and coordinates each group, and which
nodes are down (the test controls' ``/api/test/nodes``).

This is the model only: the handlers that list nodes (Metadata, FindCoordinator,
DescribeCluster) read it from ``Broker.nodes``, and ``kgroupd.broker.net.nodes`` makes the
connections of a node answer NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR for what another node
holds. With one node (the default) ``Broker.nodes`` is None and none of this runs.

Placement, as Kafka's rack-unaware assignment with every node a replica (replication factor N)
and a fixed start: partition p of every topic prefers the nodes in the order
``ids[p % N], ids[(p + 1) % N], ...``; its leader is the first of them that is up (so a node
that comes back leads its partitions again at once, as a preferred leader election does).
Each change of a partition's leader bumps its leader epoch. A group's coordinator is the
leader of its ``__consumer_offsets`` partition (``abs(hashCode) % offsets partitions``), a
transactional id's the leader of its ``__transaction_state`` partition, a share-state key
(``group:topicId:partition``, FindCoordinator key type SHARE) the leader of its
``__share_group_state`` partition (of Kafka's default 50). Data is one store:
this simulates a cluster's failures, not its replication.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kgroupd.broker.coordinator.placement import partition_for

__all__ = ["MAX_NODES", "Nodes", "NodesError"]

MAX_NODES = 16
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
SHARE_STATE = "__share_group_state"
# Kafka's share.coordinator.state.topic.num.partitions default
SHARE_STATE_PARTITIONS = 50

Address = tuple[str, int]


class NodesError(ValueError):
    """A node control that cannot be carried out: ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason


class Nodes:
    def __init__(
        self,
        first_id: int,
        count: int,
        offsets_partitions: int,
        transaction_partitions: int,
        partitions: Callable[[], Iterable[tuple[str, int]]],
    ) -> None:
        self.ids = [first_id + k for k in range(count)]
        self.down: set[int] = set()
        self.offsets_partitions = offsets_partitions
        self.transaction_partitions = transaction_partitions
        # every (topic, partition count) there is, for the leader epochs' bookkeeping
        self._partitions = partitions
        # (topic, partition) -> leader epoch; absent: 0
        self.epochs: dict[tuple[str, int], int] = {}
        # listener name -> each node's advertised address on it, in node order
        self.endpoints: dict[str, list[Address]] = {}
        # an advertised address -> (its listener's name, its node's id)
        self.at: dict[Address, tuple[str, int]] = {}
        # told of a node going down (the server closes its connections)
        self.on_down: list[Callable[[int], None]] = []
        # told after any node goes down or up (leaderships may have moved)
        self.on_moved: list[Callable[[], None]] = []
        # the futures of requests parked on a node (``kgroupd.broker.net.nodes``), set when
        # leaderships move so that they look again at what they wait for
        self.parked: set[Any] = set()
        # (group, member on a node) -> the share-session partitions a leadership move took
        # from it (``kgroupd.broker.net.node_routing``), answered NOT_LEADER_OR_FOLLOWER once
        self.moved_away: dict[tuple[str, str], set[Any]] = {}

    # --- addresses --------------------------------------------------------------------------
    def add_endpoint(self, listener: str, node_id: int, address: Address) -> None:
        row = self.endpoints.setdefault(listener, [("", -1)] * len(self.ids))
        row[self.ids.index(node_id)] = address
        self.at[address] = (listener, node_id)

    def address(self, via: Address, node_id: int) -> Address:
        """``node_id``'s address on the listener ``via`` (an advertised address) belongs to."""
        found = self.at.get(via)
        if found is None:
            return via
        return self.endpoints[found[0]][self.ids.index(node_id)]

    def brokers(self, via: Address) -> list[tuple[int, str, int]]:
        """The live nodes as a client of the listener ``via`` reaches them."""
        return [(n, *self.address(via, n)) for n in self.ids if n not in self.down]

    @property
    def controller(self) -> int:
        return min(n for n in self.ids if n not in self.down)

    # --- placement --------------------------------------------------------------------------
    def preferred(self, partition: int) -> list[int]:
        n = len(self.ids)
        return [self.ids[(partition + i) % n] for i in range(n)]

    def leader(self, partition: int) -> int:
        for node in self.preferred(partition):
            if node not in self.down:
                return node
        return -1

    def epoch(self, topic: str, partition: int) -> int:
        return self.epochs.get((topic, partition), 0)

    def partition_entry(self, topic: str, partition: int) -> dict[str, Any]:
        """A Metadata partition entry: its leader, epoch, replicas (every node), ISR (the
        live ones) and offline replicas (the down ones)."""
        replicas = self.preferred(partition)
        return {
            "error_code": 0,
            "partition_index": partition,
            "leader_id": self.leader(partition),
            "leader_epoch": self.epoch(topic, partition),
            "replica_nodes": replicas,
            "isr_nodes": [n for n in replicas if n not in self.down],
            "offline_replicas": [n for n in replicas if n in self.down],
        }

    def coordinator(self, key_type: int, key: str) -> int:
        """The node coordinating a group (key type 0), a transactional id (1) or a share
        partition's state (2, its key ``group:topicId:partition``)."""
        if key_type == 1:
            return self.leader(partition_for(key, self.transaction_partitions))
        if key_type == 2:
            return self.leader(partition_for(key, SHARE_STATE_PARTITIONS))
        return self.leader(partition_for(key, self.offsets_partitions))

    # --- up and down ------------------------------------------------------------------------
    def view(self) -> list[dict[str, Any]]:
        return [
            {
                "id": node,
                "up": node not in self.down,
                "listeners": {
                    name: f"{row[k][0]}:{row[k][1]}" for name, row in self.endpoints.items()
                },
            }
            for k, node in enumerate(self.ids)
        ]

    def set_down(self, node_id: int) -> dict[str, Any]:
        self._known(node_id)
        if node_id in self.down:
            return {"id": node_id, "up": False, "moved": 0}
        if len(self.down) + 1 >= len(self.ids):
            raise NodesError(
                409,
                "INVALID_REQUEST",
                f"node {node_id} is the last one up: a cluster needs one live node",
            )
        moved = self._moving(lambda: self.down.add(node_id))
        for tell in self.on_down:
            tell(node_id)
        for told in self.on_moved:
            told()
        return {"id": node_id, "up": False, "moved": moved}

    def set_up(self, node_id: int) -> dict[str, Any]:
        self._known(node_id)
        if node_id not in self.down:
            return {"id": node_id, "up": True, "moved": 0}
        moved = self._moving(lambda: self.down.discard(node_id))
        for told in self.on_moved:
            told()
        return {"id": node_id, "up": True, "moved": moved}

    def _known(self, node_id: int) -> None:
        if node_id not in self.ids:
            ids = ", ".join(map(str, self.ids))
            raise NodesError(404, "BROKER_NOT_AVAILABLE", f"no node {node_id} (nodes: {ids})")

    def _moving(self, change: Callable[[], None]) -> int:
        """Apply ``change``; bump the leader epoch of every partition whose leader it moves
        (the internal topics' too). Returns how many moved."""
        everything = [
            *self._partitions(),
            (OFFSETS_TOPIC, self.offsets_partitions),
            (TRANSACTION_STATE, self.transaction_partitions),
            (SHARE_STATE, SHARE_STATE_PARTITIONS),
        ]
        before = {p: self.leader(p) for p in range(max((c for _t, c in everything), default=0))}
        change()
        moved = 0
        for topic, count in everything:
            for p in range(count):
                if self.leader(p) != before[p]:
                    key = (topic, p)
                    self.epochs[key] = self.epochs.get(key, 0) + 1
                    moved += 1
        return moved
