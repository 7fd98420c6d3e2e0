"""KIP-848 consumer groups (``group.protocol=consumer``): the group, its records, the
reconciliation of each member towards its target assignment, and the heartbeat operation the
shard serves (``ops.ConsumerGroupOps``)."""
