"""Share groups under ``--data-dir``: the loaded state put back into the share service and the
group configs, and every later change handed to the store as a record
(``kgroupd.broker.share.records``).

Restored: the group configs; each share group with its epochs and members (their sessions
timed from the restart, so members that do not come back expire as usual); each share
partition's start offset and the states of its settled, archived and released offsets.
Records that were only acquired are not in the state: they are delivered again.
"""

from __future__ import annotations

from collections.abc import Callable

from kgroupd.broker.share.group_config import GroupConfigs
from kgroupd.broker.share.partition import SharePartition
from kgroupd.broker.share.records import (
    Record,
    ShareState,
    configs_record,
    group_record,
    live_records,
    members_of,
    partition_deleted,
    partition_record,
)
from kgroupd.broker.share.service import PartitionKey, ShareService


def restore_configs(configs: GroupConfigs, state: ShareState) -> None:
    for group_id, props in state.configs.items():
        configs.set_overrides(group_id, props)


def restore(service: ShareService, state: ShareState) -> None:
    for group_id, record in state.groups.items():
        service.coordinator.restore(group_id, record["ge"], record["ae"], members_of(record))
    for (group_id, topic_id, index), ps in state.partitions.items():
        sp = service.make_partition(group_id, topic_id, index, ps.start)
        sp.restore(ps.start, ps.batches())
        sp.take_changes()  # nothing to write again


def attach(
    service: ShareService, configs: GroupConfigs, append: Callable[[Record], None]
) -> Callable[[], list[Record]]:
    """Every change from now on becomes a record; returns the live state's compacted
    records (for a snapshot while running)."""

    def changed(key: PartitionKey, sp: SharePartition) -> None:
        got = sp.take_changes()
        if got is not None:
            append(partition_record(key, got[0], got[1], False))

    service.on_changed = changed
    service.track = True
    for sp in service.partitions.values():
        sp.track = True
    service.on_dropped = lambda key: append(partition_deleted(key))
    service.coordinator.on_group_changed = lambda group: append(group_record(group))
    service.coordinator.on_group_deleted = lambda group_id: append({"t": "group-", "g": group_id})
    configs.on_change = lambda group_id, props: append(configs_record(group_id, props))

    def snapshot() -> list[Record]:
        return list(
            live_records(
                service.coordinator.groups.values(),
                service.partitions.items(),
                configs.all_overrides(),
            )
        )

    return snapshot
