"""The driver's side of Kafka: a private event loop and an admin client for partitions,
offsets and group commits."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
from aiokafka.protocol.commit import OffsetCommitRequest

from kgroupd.pipeline.source.cluster import ClusterFacts, describe_any
from kgroupd.pipeline.source.options import (
    COORDINATOR_GROUP,
    NO_ERROR,
    TP,
    Offsets,
    SourceOptions,
    T,
)


class EventLoop:
    """A private event loop that blocking code drives, one coroutine at a time.

    Not ``asyncio.Runner``: on the main thread it swaps the SIGINT handler on every ``run``,
    and restoring it formats the repr of the finished task, result included, which for a
    fetch response is megabytes of bytes (most of the read time in a profile)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    def __enter__(self) -> EventLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KafkaAdmin:
    """Metadata, ListOffsets and simple (generation -1) offset commits, through aiokafka on a
    private event loop. Used from the driver only; every method blocks."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._runner = EventLoop()
        self._client: AIOKafkaClient | None = None
        self._consumer: AIOKafkaConsumer | None = None

    def _run(self, coro: Any) -> Any:
        return self._runner.run(coro)

    async def _start(self) -> None:
        if self._client is None:
            client = AIOKafkaClient(
                bootstrap_servers=self.opts.bootstrap_servers, **self.opts.client_args()
            )
            await client.bootstrap()
            self._client = client
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.opts.bootstrap_servers,
                enable_auto_commit=False,
                **self.opts.client_args(),
            )
            await consumer.start()
            self._consumer = consumer

    def partitions(self) -> list[TP]:
        """The topic-partitions the options select that exist now."""
        return self._run(self._partitions())

    async def _partitions(self) -> list[TP]:
        await self._start()
        assert self._client is not None
        cluster = await self._client.fetch_all_metadata()
        found: list[TP] = []
        for topic in cluster.topics():
            if not self.opts.selects(topic):
                continue
            for partition in cluster.partitions_for_topic(topic) or ():
                found.append((topic, partition))
        if self.opts.assign:
            wanted = set(self.opts.assign)
            found = [tp for tp in found if tp in wanted]
        return sorted(found)

    def offsets(self, tps: Sequence[TP]) -> tuple[Offsets, Offsets]:
        """(earliest, latest) of each topic-partition."""
        return self._run(self._offsets(list(tps)))

    async def _offsets(self, tps: list[TP]) -> tuple[Offsets, Offsets]:
        await self._start()
        assert self._consumer is not None
        if not tps:
            return {}, {}
        kafka_tps = [TopicPartition(t, p) for t, p in tps]
        first = await self._consumer.beginning_offsets(kafka_tps)
        last = await self._consumer.end_offsets(kafka_tps)
        return (
            {(tp.topic, tp.partition): int(o) for tp, o in first.items()},
            {(tp.topic, tp.partition): int(o) for tp, o in last.items()},
        )

    def facts(self, topics: Sequence[str]) -> ClusterFacts:
        """The cluster id and the ids of ``topics``, to tell which log offsets refer to."""
        timeout_s = dict(self.opts.client_options).get("request_timeout_ms", 10_000) / 1000
        return self._run(
            describe_any(
                self.opts.bootstrap_servers, sorted(set(topics)), timeout_s, self.opts.security
            )
        )

    def commit(self, group: str, offsets: Offsets) -> None:
        self._run(self._commit(group, offsets))

    async def _commit(self, group: str, offsets: Offsets) -> None:
        await self._start()
        assert self._client is not None
        if not offsets:
            return
        node = await self._client.coordinator_lookup(COORDINATOR_GROUP, group)
        topics: dict[str, list[tuple[int, int, str]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append((partition, offset, ""))
        request = OffsetCommitRequest(
            group,
            OffsetCommitRequest.DEFAULT_GENERATION_ID,  # -1: a simple commit, no membership
            "",
            OffsetCommitRequest.DEFAULT_RETENTION_TIME,
            list(topics.items()),
        )
        response = await self._client.send(node, request)
        failed = [
            (topic, partition, code)
            for topic, parts in response.topics
            for partition, code in parts
            if code != NO_ERROR
        ]
        if failed:
            raise RuntimeError(f"OffsetCommit to group {group!r} failed: {failed}")

    def close(self) -> None:
        async def stop() -> None:
            if self._consumer is not None:
                await self._consumer.stop()
            if self._client is not None:
                await self._client.close()

        try:
            self._run(stop())
        finally:
            self._consumer = self._client = None
            self._runner.close()
