"""The broker's share-group state in one place: the share-group coordinator, the share partitions
and the share sessions (Kafka's ShareSessionCache), built on first use from the broker's timers.

Share sessions, as Kafka keys and checks them: one per (group, member). Epoch 0 opens a session
(replacing the member's previous one, whose records stay the member's), -1 closes it (what the
member holds is released), and any other epoch must be the session's next one: no session is
SHARE_SESSION_NOT_FOUND, another epoch INVALID_SHARE_SESSION_EPOCH. The epoch after 2**31-1
is 1.

As Kafka's ShareSessionCache, a session belongs to the connection that opened it: when that
connection closes, the session goes and what its member holds is released (its records are
available at once, not after their locks). The cache holds at most
``group.share.max.share.sessions`` sessions (``--group-share-max-share-sessions``, 2000): an
epoch-0 request that would open one more is SHARE_SESSION_LIMIT_REACHED (Kafka evicts none).
With simulated nodes (``cache_of``) each node's sessions count against their own limit, as
each Kafka broker bounds its own cache.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kgroupd.broker.coordinator.share.coordinator import ShareGroupCoordinator, TopicsView
from kgroupd.broker.coordinator.timers import Timers
from kgroupd.broker.log.partition import PartitionLog
from kgroupd.broker.share.group_config import GroupConfigs, by_duration_ms
from kgroupd.broker.share.partition import Limits, SharePartition
from kgroupd.protocol.errors import ErrorCode

INITIAL_EPOCH, FINAL_EPOCH = 0, -1

TopicPartition = tuple[uuid.UUID, int]
PartitionKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: set[TopicPartition] = field(default_factory=set)
    # the connection that opened it (its ``closers`` list: the session ends with it)
    connection: object = None
    # ShareFetch v2 ShareAcquireMode: 0 batch-optimized (whole batches, the record limit may
    # be passed to end at a batch's boundary), 1 record-limit
    whole_batches: bool = True


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class ShareService:
    def __init__(
        self,
        timers: Timers,
        topics: TopicsView,
        configs: GroupConfigs,
        max_size: int,
        other_group_exists: Callable[[str], bool],
        max_sessions: int = 2000,
    ) -> None:
        self.timers = timers
        self.configs = configs
        self.coordinator = ShareGroupCoordinator(
            timers, topics, configs, max_size, other_group_exists
        )
        self.coordinator.on_member_removed = self.member_gone
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.max_sessions = max_sessions  # group.share.max.share.sessions
        # the cache a member's session counts against (None: the one of this broker; set by
        # ``kgroupd.broker.net.node_routing``: its simulated node's)
        self.cache_of: Callable[[str], str] | None = None
        # the sessions each open connection opened (by its closers list's id)
        self._by_connection: dict[int, set[tuple[str, str]]] = {}
        # whether share partitions keep their changes for a store (``durable.attach``)
        self.track = False
        # records delivered, acknowledged by type, expired, archived at the delivery limit
        self.counts: dict[str, int] = {}
        # share fetches waiting for records of a share partition to become available again
        self.waiters: dict[PartitionKey, list[asyncio.Future[None]]] = {}
        # what is persisted (``kgroupd.broker.share.durable``): a share partition whose state
        # changed (its ``take_changes``), one dropped
        self.on_changed: Callable[[PartitionKey, SharePartition], None] = lambda _k, _sp: None
        self.on_dropped: Callable[[PartitionKey], None] = lambda _k: None

    # --- sessions ----------------------------------------------------------------------------

    def session(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        closers: list[Callable[[], None]] | None = None,
    ) -> ShareSession | ErrorCode:
        """The session a request with ``epoch`` works in (opened at 0 for the connection whose
        ``closers`` are given), or its error."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            old = self.sessions.get(key)
            if old is None and self._full(member_id):
                return ErrorCode.SHARE_SESSION_LIMIT_REACHED
            if old is not None:  # replaced: the member keeps what it holds (as in Kafka)
                self._end(old, release=False)
            session = self.sessions[key] = ShareSession(group_id, member_id, 1)
            if closers is not None:
                session.connection = closers
                opened = self._by_connection.get(id(closers))
                if opened is None:
                    opened = self._by_connection[id(closers)] = set()
                    closers.append(lambda: self.connection_closed(closers))
                opened.add(key)
            return session
        session_or_none = self.sessions.get(key)
        if session_or_none is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch != FINAL_EPOCH and epoch != session_or_none.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        return session_or_none

    def _full(self, member_id: str) -> bool:
        """Whether the cache a new session of ``member_id`` would join holds its limit."""
        if len(self.sessions) < self.max_sessions:
            return False
        cache_of = self.cache_of
        if cache_of is None:
            return True
        cache = cache_of(member_id)
        held = sum(1 for _group, member in self.sessions if cache_of(member) == cache)
        return held >= self.max_sessions

    def advance(self, session: ShareSession, epoch: int) -> None:
        """After a request: the next epoch, or at -1 the session closes and what the member
        holds is released."""
        if epoch == FINAL_EPOCH:
            self._end(session)
        else:
            session.epoch = next_epoch(epoch)

    def _end(self, session: ShareSession, release: bool = True) -> None:
        """The session goes (closed, its connection or its member gone: what its member holds
        is released; replaced by a new one at epoch 0: not)."""
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
        if session.connection is not None:
            opened = self._by_connection.get(id(session.connection))
            if opened is not None:
                opened.discard(key)
        if release:
            self.release(session.group_id, session.member_id)

    def connection_closed(self, closers: list[Callable[[], None]]) -> None:
        """The connection whose ``closers`` these are closed: the sessions it opened end."""
        for key in self._by_connection.pop(id(closers), ()):
            session = self.sessions.get(key)
            if session is not None and session.connection is closers:
                self._end(session)

    # --- partitions --------------------------------------------------------------------------

    def partition(
        self, group_id: str, topic_id: uuid.UUID, index: int, log: PartitionLog
    ) -> SharePartition:
        """The share partition of (group, topic partition), made on first use at the offset
        share.auto.offset.reset names; moved up with the log's start offset."""
        key = (group_id, topic_id, index)
        sp = self.partitions.get(key)
        if sp is None:
            sp = self.make_partition(group_id, topic_id, index, self.reset_offset(group_id, log))
        if log.log_start_offset > sp.start_offset:
            sp.move_start(log.log_start_offset)
        return sp

    def make_partition(
        self, group_id: str, topic_id: uuid.UUID, index: int, start: int
    ) -> SharePartition:
        key = (group_id, topic_id, index)
        sp = SharePartition(
            f"{group_id}/{topic_id}/{index}",
            start,
            self.timers,
            self._limits(group_id),
            self.counts,
        )
        sp.changed = lambda changed: self.on_changed(key, changed)
        sp.track = self.track
        sp.freed = lambda _sp: self._wake(key)
        self.partitions[key] = sp
        sp.start_moved = True  # its start offset is state to keep (Kafka initializes it)
        self.on_changed(key, sp)
        return sp

    def reset_partition(self, group_id: str, topic_id: uuid.UUID, index: int, start: int) -> None:
        """AlterShareGroupOffsets: the share partition starts afresh at ``start``."""
        self.drop_partition(group_id, topic_id, index)
        self.make_partition(group_id, topic_id, index, start)

    def drop_partition(self, group_id: str, topic_id: uuid.UUID, index: int) -> None:
        """DeleteShareGroupOffsets, DeleteGroups: the share partition's state is gone (its
        locks fire on the old object, which nothing reaches any more)."""
        if self.partitions.pop((group_id, topic_id, index), None) is not None:
            self.on_dropped((group_id, topic_id, index))

    def wait_for_available(self, key: PartitionKey) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(key, []).append(fut)
        return fut

    def _wake(self, key: PartitionKey) -> None:
        for fut in self.waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def reset_offset(self, group_id: str, log: PartitionLog) -> int:
        """Where a new share partition starts (share.auto.offset.reset): the log start
        (earliest), the high watermark (latest), or by_duration:<ISO-8601 duration> the first
        batch whose timestamp is at least that long ago (latest if none is)."""
        reset = self.configs.str_value(group_id, "share.auto.offset.reset")
        low = reset.lower()
        if low == "earliest":
            return log.log_start_offset
        if low == "latest":
            return log.high_watermark
        duration = by_duration_ms(reset)
        if duration is None:  # pragma: no cover (validated when set)
            return log.high_watermark
        found = log.batch_at_timestamp(self.timers.now_ms() - duration)
        if found is None:
            return log.high_watermark
        return max(found.base_offset, log.log_start_offset)

    def read_committed(self, group_id: str) -> bool:
        return self.configs.str_value(group_id, "share.isolation.level") == "read_committed"

    def _limits(self, group_id: str) -> Callable[[], Limits]:
        def limits() -> Limits:
            return Limits(
                self.configs.int_value(group_id, "share.record.lock.duration.ms"),
                self.configs.int_value(group_id, "share.delivery.count.limit"),
                self.configs.int_value(group_id, "share.partition.max.record.locks"),
            )

        return limits

    def lock_duration_ms(self, group_id: str) -> int:
        return self.configs.int_value(group_id, "share.record.lock.duration.ms")

    def release(self, group_id: str, member_id: str) -> None:
        for (group, _t, _p), sp in self.partitions.items():
            if group == group_id:
                sp.release_member(member_id)

    def member_gone(self, group_id: str, member_id: str) -> None:
        """The coordinator removed the member: its session ends, its records come back."""
        session = self.sessions.get((group_id, member_id))
        if session is not None:
            self._end(session)
        else:
            self.release(group_id, member_id)
