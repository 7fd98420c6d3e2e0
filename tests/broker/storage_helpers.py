"""What the storage tests share: one broker subprocess with one coordinator shard (its
snapshot is coordinator/shard-00.snapshot; records go to the shared coordinator/log-*.log),
and simple-group commits with checkable metadata."""

from __future__ import annotations

from tests.support.broker_process import BrokerProcess, fetch_committed
from tests.support.groups import OFFSET_COMMIT, RawConnection

GROUP, TOPIC, PARTITIONS = "g", "t", 4
BROKER_ARGS = ("--offsets-partitions", "1", "--create-topic", f"{TOPIC}:{PARTITIONS}")


async def commit(broker: BrokerProcess, offsets: dict[int, int], group: str = GROUP) -> None:
    """One OffsetCommit v7 (simple group) of ``{partition: offset}``, metadata ``m<offset>``."""
    async with await RawConnection.open(broker.bootstrap) as conn:
        resp = await conn.call(
            OFFSET_COMMIT,
            7,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[(TOPIC, [(p, o, -1, f"m{o}") for p, o in offsets.items()])],
        )
    errors = [p["error_code"] for t in resp["topics"] for p in t["partitions"]]
    assert errors == [0] * len(offsets), resp


async def committed(broker: BrokerProcess, group: str = GROUP) -> dict[int, int]:
    """``{partition: offset}`` committed by ``group``; every metadata is ``m<offset>``."""
    got = await fetch_committed(broker.port, group, TOPIC, list(range(PARTITIONS)))
    for offset, metadata in got.values():
        assert metadata == f"m{offset}"
    return {p: offset for p, (offset, _) in got.items()}
