"""The lane of the hot requests under ``--fsync always``: an OffsetCommit that wrote is
answered from the lane (a ``HeldAnswer``), and only once the fsync of what it wrote is done.

Each commit is sent down the lane (a client id) and down the general path (a null client id)
to a real broker with ``--data-dir``; the sync each waits for is tapped (the broker's
``state_synced`` hands out a future this test resolves, after the real fsync): no answer
comes before it, both answers are byte-equal, an answer of errors only is not held, and an
answer behind a held one still waits its turn.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kgroupd.broker.config.settings import TopicSpec
from kgroupd.broker.handlers.group_offsets import _answered_none
from kgroupd.broker.handlers.registry import HeldAnswer
from kgroupd.broker.net import connection as connection_module
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast import encode_offset_commit_response
from kgroupd.protocol.messages import lookup

TOPIC = "lane-fsync"


class Tap:
    """The broker's coordinator syncs, each handed out as a future the test resolves."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.pending: list[tuple[asyncio.Future[None] | None, asyncio.Future[None]]] = []
        self.asked = asyncio.Event()

    def __call__(self) -> asyncio.Future[None]:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((self.real(), gate))
        self.asked.set()
        return gate

    async def release(self) -> None:
        """Every sync asked so far: once the real one is done, resolve its gate."""
        pending, self.pending = self.pending, []
        self.asked.clear()
        for real, gate in pending:
            if real is not None:
                await real
            gate.set_result(None)


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[KafkaServer]:
    async with running_server(
        log_level="warning",
        data_dir=tmp_path,
        fsync="always",
        create_topics=(TopicSpec(TOPIC, 4),),
    ) as srv:
        yield srv


class Wire:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.corr = reader, writer, 0

    def send(self, version: int, client: str | None, **fields: Any) -> int:
        spec = lookup(8, version)
        assert spec is not None
        self.corr += 1
        cid = b"\xff\xff" if client is None else struct.pack(">h", len(client)) + client.encode()
        header = struct.pack(">hhi", 8, version, self.corr) + cid
        if spec.flexible:
            header += b"\x00"
        payload = header + spec.encode_request(fields)
        self.writer.write(struct.pack(">i", len(payload)) + payload)
        return self.corr

    async def receive(self, version: int, corr: int) -> bytes:
        """The answer's body after its header."""
        spec = lookup(8, version)
        assert spec is not None
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 10))[0]
        data = await asyncio.wait_for(self.reader.readexactly(size), 10)
        assert struct.unpack(">i", data[:4])[0] == corr
        return data[5:] if spec.response_header_v1 else data[4:]

    async def nothing_yet(self) -> None:
        """No answer has come (the broker had its turns: it is in this process's loop)."""
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(self.reader.readexactly(1), 0.2)


def commit(group: str, offset: int, generation: int = -1) -> dict[str, Any]:
    parts = [{"partition_index": p, "committed_offset": offset + p} for p in (0, 2)]
    return {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": "",
        "topics": [{"name": TOPIC, "partitions": parts}],
    }


@pytest.mark.asyncio
async def test_lane_commits_are_answered_after_their_fsync(
    server: KafkaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    durability = server.broker.durability
    assert durability is not None
    tap = Tap(durability.state_synced)
    monkeypatch.setattr(durability, "state_synced", tap)
    lane_answers: list[type] = []
    real_hot = connection_module.hot_answer

    def hot_answer(*args: Any) -> Any:
        answer = real_hot(*args)
        lane_answers.append(type(answer))
        return answer

    monkeypatch.setattr(connection_module, "hot_answer", hot_answer)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    wire = Wire(reader, writer)
    shard = server.broker.coordinator.shard_for
    try:
        for version in (2, 8, 9):
            group = f"lane-fsync-{version}"
            answers = []
            for round_, client in enumerate(("lane", None, "lane", None)):  # shapes: 2nd lane
                lane_answers.clear()
                corr = wire.send(version, client, **commit(group, 100 * round_))
                await asyncio.wait_for(tap.asked.wait(), 10)  # the commit asked its sync
                await wire.nothing_yet()  # committed, not yet on disk: not answered
                assert shard(group).offsets[group][TOPIC][2].offset == 100 * round_ + 2
                await tap.release()
                answers.append(await wire.receive(version, corr))
                # the lane answered it (held), or the general path did (a null client id)
                assert lane_answers == [HeldAnswer if client else type(None)]
            assert answers[0] == answers[1] == answers[2] == answers[3]
            spec = lookup(8, version)
            assert spec is not None
            codes = [
                p["error_code"] for p in spec.decode_response(answers[0])["topics"][0]["partitions"]
            ]
            assert codes == [0, 0]

            # errors only (a generation for a simple group): nothing written, nothing held
            errors = []
            for client in ("lane", None):
                corr = wire.send(version, client, **commit(group, 7, generation=5))
                errors.append(await wire.receive(version, corr))
            assert errors[0] == errors[1] and not tap.pending
            codes = [
                p["error_code"] for p in spec.decode_response(errors[0])["topics"][0]["partitions"]
            ]
            assert codes == [25, 25]  # UNKNOWN_MEMBER_ID

            # an answer behind a held one waits its turn, in order
            held = wire.send(version, "lane", **commit(group, 1000))
            refused = wire.send(version, "lane", **commit(group, 7, generation=5))
            await asyncio.wait_for(tap.asked.wait(), 10)  # the commit asked its sync
            await wire.nothing_yet()
            await tap.release()
            assert await wire.receive(version, held) == answers[0]
            assert await wire.receive(version, refused) == errors[0]
    finally:
        writer.close()


def test_a_shaped_answer_with_errors_is_held_only_if_a_partition_committed() -> None:
    """The lane's learned shapes (v0-v9) answer refused partitions from the coordinator's
    result: held if any partition committed, not if every one was refused."""
    member, too_large = ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.OFFSET_METADATA_TOO_LARGE
    for version in range(10):
        refused = encode_offset_commit_response(version, (("t", ((0, member), (1, member))),))
        partly = encode_offset_commit_response(
            version, (("t", ((0, ErrorCode.NONE), (1, too_large))),)
        )
        assert not _answered_none(version, refused)
        assert _answered_none(version, partly)
