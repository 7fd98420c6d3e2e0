"""Authorized-operations bitfields (KIP-430) as Kafka answers them with no authorizer: every
operation Kafka defines on the resource type. Bit n is Kafka's AclOperation code n."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgroupd.broker.handlers.registry import RequestContext

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


NOT_REQUESTED = -(2**31)  # Kafka's "authorized operations were not requested"
GROUP_OPERATIONS = bits(READ, DESCRIBE, DELETE)
TOPIC_OPERATIONS = bits(
    READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS
)
CLUSTER_OPERATIONS = bits(
    CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE
)


def authorized(ctx: RequestContext, resource_type: int, name: str, operations: int) -> int:
    """The bitfield of ``operations`` the connection's principal may do on the resource:
    all of them without an authorizer, else those the ACLs allow."""
    access = ctx.access
    if access is None:
        return operations
    out = 0
    for op in range(32):
        if operations & (1 << op) and access.allowed(resource_type, name, op):
            out |= 1 << op
    return out
