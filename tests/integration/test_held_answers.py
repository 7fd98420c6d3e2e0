"""Answers held for their fsync (``--fsync always``) do not stop a connection.

A commit is answered only once its records are on disk, but the requests pipelined behind it
are handled meanwhile, so one fsync covers the whole pipeline of a connection (group commit
within a connection, not only across connections), and the answers still leave in request
order. If the fsync fails, nothing is acknowledged: that connection is closed, and the
others carry on.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from kgroupd.broker.testing import running_server
from tests.support.kafka_wire import WireClient, create_topic

OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 8, 9, 18
COMMITS = 64
PARTITIONS = 8


def commit_body(group: str, topic: str, offset: int) -> dict[str, object]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offset + p,
                        "committed_metadata": f"m{offset}",
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }


async def test_a_pipeline_of_commits_shares_one_fsync_and_is_answered_in_order(
    tmp_path: Path,
) -> None:
    async with running_server(data_dir=tmp_path, fsync="always") as server:
        durability = server.broker.durability
        assert durability is not None and durability.worker is not None
        async with await WireClient.connect(server.port) as client:
            await create_topic(client, "held", PARTITIONS)
            before = durability.worker.fsyncs
            requests: list[tuple[int, int, dict[str, object]]] = [
                (OFFSET_COMMIT, 2, commit_body("g", "held", i * 100)) for i in range(COMMITS)
            ]
            requests.append((API_VERSIONS, 0, {}))  # not held itself: must wait its turn
            corrs = await client.send_many(requests)
            for corr in corrs[:-1]:
                reply = await client.receive(OFFSET_COMMIT, 2, corr)
                codes = [p["error_code"] for t in reply["topics"] for p in t["partitions"]]
                assert codes == [0] * PARTITIONS
            versions = await client.receive(API_VERSIONS, 0, corrs[-1])
            assert versions["error_code"] == 0
            rounds = durability.worker.fsyncs - before
            # One connection's pipeline is one read: its commits share an fsync (a read may
            # be split, hence a little slack); answered one fsync each, it would be 64.
            assert 1 <= rounds <= 4, rounds
            fetched = await client.request(
                OFFSET_FETCH,
                1,
                {
                    "group_id": "g",
                    "topics": [{"name": "held", "partition_indexes": list(range(PARTITIONS))}],
                },
            )
            last = (COMMITS - 1) * 100
            assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == [
                last + p for p in range(PARTITIONS)
            ]


async def test_a_failed_fsync_acknowledges_nothing_and_closes_only_that_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = False
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        # An I/O error on the disk cannot be made for real here.
        if failing:
            raise OSError(5, "Input/output error (injected)")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with (
        running_server(data_dir=tmp_path, fsync="always") as server,
        await WireClient.connect(server.port) as victim,
        await WireClient.connect(server.port) as bystander,
    ):
        await create_topic(victim, "held", PARTITIONS)
        failing = True
        try:
            await victim.send_many(
                [(OFFSET_COMMIT, 2, commit_body("g", "held", i)) for i in range(4)]
            )
            with pytest.raises(asyncio.IncompleteReadError) as closed:
                await victim.read_frame()
            assert closed.value.partial == b""  # not one answer went out
            versions = await bystander.request(API_VERSIONS, 0, {})
            assert versions["error_code"] == 0
        finally:
            failing = False
        # The disk is back: commits are acknowledged again.
        reply = await bystander.request(OFFSET_COMMIT, 2, commit_body("g", "held", 500))
        assert [p["error_code"] for p in reply["topics"][0]["partitions"]] == [0] * PARTITIONS
