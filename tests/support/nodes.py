"""Helpers of the simulated-node tests (``--nodes 3 --node-id 1``)."""

from __future__ import annotations

from kgroupd.broker.net.server import KafkaServer


def ports(server: KafkaServer) -> dict[int, int]:
    """Each node's port (the one listener)."""
    nodes = server.broker.nodes
    assert nodes is not None
    return {n: addr[1] for n, addr in zip(nodes.ids, nodes.endpoints["PLAINTEXT"], strict=True)}


def leader(p: int) -> int:
    """Partition ``p``'s leader with every node of ``--nodes 3 --node-id 1`` up."""
    return 1 + p % 3
