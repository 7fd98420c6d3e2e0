"""Shared harness for coordinator unit tests: one shard on a manual clock."""

from __future__ import annotations

import dataclasses
from typing import Any

from kgroupd.broker.coordinator import (
    CoordinatorConfig,
    CoordinatorShard,
    Deferred,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    ManualTimers,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResult,
    OffsetCommitTopic,
    OffsetFetch,
    OffsetFetchResult,
    OffsetFetchTopic,
    Record,
    SyncGroup,
    SyncGroupResult,
)
from kgroupd.broker.coordinator.consumer_protocol import encode_subscription
from kgroupd.broker.coordinator.group import ClassicGroup
from kgroupd.broker.coordinator.records import CommitEntries, OffsetCommitRecord, RecordSink

DELAY = 100  # initial rebalance delay in tests
SESSION = 1000
REBALANCE = 2000

TEST_CONFIG = CoordinatorConfig(
    offsets_partitions=1,
    initial_rebalance_delay_ms=DELAY,
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=100_000,
    new_member_join_timeout_ms=5000,
)

RANGE = (("range", encode_subscription(["t"])),)


def sub(*topics: str) -> bytes:
    return encode_subscription(list(topics))


class ListSink:
    """Collects what a shard emits. As a batch sink (what the broker's store is), a topic's
    offset commits arrive at once and are kept as the records they stand for."""

    def __init__(self, records: list[Record]) -> None:
        self.records = records

    def __call__(self, record: Record, /) -> None:
        self.records.append(record)

    def offset_commits(
        self,
        group_id: str,
        topic: str,
        entries: CommitEntries,
        commit_timestamp_ms: int,
        expire_timestamp_ms: int | None,
    ) -> None:
        self.records.extend(
            OffsetCommitRecord(
                group_id, topic, p, o, e, m, commit_timestamp_ms, expire_timestamp_ms
            )
            for p, o, e, m in entries
        )


class Harness:
    """A shard on a manual clock. ``batch_sink=False`` hands it a plain record sink (one
    record per committed partition) instead of a batch sink."""

    def __init__(
        self, config: CoordinatorConfig = TEST_CONFIG, batch_sink: bool = True, **overrides: Any
    ) -> None:
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.timers = ManualTimers()
        self.records: list[Record] = []
        sink: RecordSink = ListSink(self.records) if batch_sink else self.records.append
        self.shard = CoordinatorShard(0, config, self.timers, sink=sink)

    # --- operations ------------------------------------------------------------------------
    def join(
        self,
        member_id: str = "",
        group: str = "g",
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = RANGE,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        ptype: str = "consumer",
        v4: bool = False,
        v9: bool = False,
        client_id: str = "client",
    ) -> Deferred[JoinGroupResult]:
        return self.shard.join_group(
            JoinGroup(
                group_id=group,
                member_id=member_id,
                group_instance_id=instance,
                client_id=client_id,
                client_host="/127.0.0.1",
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                protocol_type=ptype,
                protocols=protocols,
                require_known_member_id=v4,
                skip_assignment_supported=v9,
            )
        )

    def sync(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        instance: str | None = None,
        assignments: tuple[tuple[str, bytes], ...] = (),
        ptype: str | None = None,
        pname: str | None = None,
    ) -> Deferred[SyncGroupResult]:
        return self.shard.sync_group(
            SyncGroup(group, generation, member_id, instance, ptype, pname, assignments)
        )

    def hb(
        self, member_id: str, generation: int, group: str = "g", instance: str | None = None
    ) -> HeartbeatResult:
        return self.shard.heartbeat(Heartbeat(group, generation, member_id, instance))

    def leave(self, *members: tuple[str, str | None], group: str = "g") -> LeaveGroupResult:
        return self.shard.leave_group(LeaveGroup(group, tuple(members)))

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        group: str = "g",
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str | None = None,
        v9: bool = False,
        retention: int = -1,
    ) -> OffsetCommitResult:
        topics: dict[str, list[OffsetCommitPartition]] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(OffsetCommitPartition(p, o, 3, metadata))
        return self.shard.commit_offsets(
            OffsetCommit(
                group,
                tuple(OffsetCommitTopic(t, tuple(ps)) for t, ps in topics.items()),
                generation,
                member_id,
                instance,
                retention,
                v9,
            )
        )

    def fetch(
        self, group: str = "g", topics: dict[str, tuple[int, ...]] | None = None
    ) -> OffsetFetchResult:
        req = None if topics is None else tuple(OffsetFetchTopic(t, ps) for t, ps in topics.items())
        return self.shard.fetch_offsets(OffsetFetch(group, req))

    def group(self, group_id: str = "g") -> ClassicGroup:
        return self.shard.groups[group_id]

    def advance(self, ms: int) -> None:
        self.timers.advance(ms)

    # --- scenarios -------------------------------------------------------------------------
    def form(
        self, n: int, group: str = "g", instances: list[str | None] | None = None, **kw: Any
    ) -> list[str]:
        """n members join a new group and finish the initial rebalance (CompletingRebalance).
        Returns member ids, leader first."""
        insts = instances or [None] * n
        waiters = [self.join(group=group, instance=insts[i], **kw) for i in range(n)]
        while not all(w.done() for w in waiters):
            self.advance(DELAY)
        results = [w.result() for w in waiters]
        assert all(r.error == 0 for r in results), results
        leader = results[0].leader
        ids = [r.member_id for r in results]
        ids.remove(leader)
        return [leader, *ids]

    def stable(self, n: int, group: str = "g", **kw: Any) -> list[str]:
        """n members in a Stable group; the leader assigns b"a-<member>" to everyone."""
        ids = self.form(n, group=group, **kw)
        gen = self.group(group).generation_id
        syncs = [self.sync(m, gen, group=group) for m in ids[1:]]
        lead = self.sync(
            ids[0], gen, group=group, assignments=tuple((m, f"a-{m}".encode()) for m in ids)
        )
        assert lead.result().error == 0
        assert all(s.result().error == 0 for s in syncs)
        return ids
