"""Log compaction (issue "Bounded under abuse, and topic data beyond memory, with log
compaction"): the cleaner keeps each key's latest record in the closed part of a
``cleanup.policy=compact`` topic, at its original offset, with and without --data-dir; drops
tombstones once delete.retention.ms has passed; survives kill -9 mid-clean; removes aborted
transactions' records; and keyless records are refused at produce time.

The data: 100,000 updates of 1,000 keys (key ``k0042``, value ``k0042=000123`` where 123 is
the update's round) as pre-encoded raw Produce frames of 100 records, then tombstones for the
first 100 keys, then one batch larger than segment.bytes (key ``~roll``) so that every update
and tombstone lies in closed segments (the active segment is never cleaned).
"""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from kgroupd.broker.log.partition import PartitionLog, now_ms
from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from kgroupd.protocol.records import build_batch, parse_header, with_base_offset
from tests.support.broker_process import broker_process
from tests.support.kafka_wire import (
    WireClient,
    create_topic,
    decode_response,
    encode_request,
    fetch_request,
    iter_records,
    only_partition,
    produce_request,
)

TOPIC = "compacted"
KEYS = 1000
UPDATES = 100_000
PER_BATCH = 100
DEAD = 100  # keys 0..99 end with a tombstone
SEGMENT_BYTES = 32 * 1024
ROLL = 40 * 1024  # the last batch's value: more than segment.bytes, alone in the active one
_I64, _I32 = struct.Struct(">q"), struct.Struct(">i")
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(SEGMENT_BYTES),
    "delete.retention.ms": "3000",
    "min.cleanable.dirty.ratio": "0.1",  # the last segments' pass, whatever came before
}


def key(i: int) -> bytes:
    return b"k%04d" % i


def update_batches() -> list[bytes]:
    now = now_ms()
    out = []
    for start in range(0, UPDATES, PER_BATCH):
        recs = []
        for n in range(start, start + PER_BATCH):
            i, rnd = n % KEYS, n // KEYS
            recs.append((n - start, key(i), key(i) + b"=%06d" % rnd, now))
        out.append(build_batch(recs))
    out.append(build_batch([(n, key(n), None, now) for n in range(DEAD)]))
    out.append(build_batch([(0, b"~roll", b"x" * ROLL, now)]))
    return out


def expected() -> dict[bytes, bytes | None]:
    last_round = (UPDATES - 1) // KEYS
    want: dict[bytes, bytes | None] = {key(i): key(i) + b"=%06d" % last_round for i in range(KEYS)}
    for i in range(DEAD):
        want[key(i)] = None
    return want


async def produce_all(port: int, batches: list[bytes], window: int = 200) -> None:
    frames = [
        encode_request(0, 8, i, produce_request(TOPIC, 0, b, acks=1), "raw")
        for i, b in enumerate(batches)
    ]
    async with await WireClient.connect(port) as wire:
        for start in range(0, len(frames), window):
            chunk = frames[start : start + window]
            wire.writer.write(b"".join(chunk))
            await wire.writer.drain()
            for _ in chunk:
                _corr, body = decode_response(0, 8, await wire.read_frame())
                (part,) = body["responses"][0]["partition_responses"]
                assert part["error_code"] == 0, part


async def read_log(port: int, committed: bool = False) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from offset 0, stepping over gaps by each batch's
    last offset (as a consumer does), checking offsets only grow."""
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = 0
    async with await WireClient.connect(port) as wire:
        while True:
            body = fetch_request(TOPIC, 0, offset, max_bytes=1 << 22, partition_max_bytes=1 << 22)
            body["isolation_level"] = int(committed)
            part = only_partition(await wire.request(1, 11, body))
            assert part["error_code"] == 0, part
            end = part["last_stable_offset"] if committed else part["high_watermark"]
            data = part["records"] or b""
            aborted = sorted(
                (a["first_offset"], a["producer_id"])
                for a in part.get("aborted_transactions") or []
            )
            dropping: set[int] = set()  # producers inside an aborted transaction
            pos = 0
            while pos < len(data):
                base = _I64.unpack_from(data, pos)[0]
                length = _I32.unpack_from(data, pos + 8)[0] + 12
                header = parse_header(data, pos)
                batch = data[pos : pos + length]
                pos += length
                while aborted and aborted[0][0] <= base:
                    dropping.add(aborted.pop(0)[1])
                pid = header.producer_id
                skip = committed and header.is_transactional and pid in dropping
                if header.attributes & 0x20:
                    dropping.discard(pid)  # the transaction's marker ends it
                elif not skip:
                    for rec in iter_records(batch):
                        if rec.offset >= offset:
                            assert not out or rec.offset > out[-1][0]
                            out.append((rec.offset, rec.key, rec.value))
                offset = max(offset, base + header.last_offset_delta + 1)
            if offset >= end:
                return out
            assert data, f"nothing at {offset} below {end}"


def check_latest(records: list[tuple[int, bytes, bytes | None]], tombstones: bool) -> None:
    mine = [r for r in records if r[1] != b"~roll"]
    got = {k: v for _o, k, v in mine}
    want = expected()
    if not tombstones:
        want = {k: v for k, v in want.items() if v is not None}
    assert len(mine) == len(want), (len(mine), len(want))
    assert got == want
    # each at its original offset: the last update of key i was record n with n % KEYS == i
    for offset, k, v in mine:
        i = int(k[1:])
        if v is None:
            assert offset == UPDATES + i
        else:
            assert offset == UPDATES - KEYS + i


async def wait_for(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("on_disk", [True, False], ids=["data-dir", "in-memory"])
async def test_the_cleaner_keeps_the_latest_of_each_key_at_its_offset(
    tmp_path: Path, on_disk: bool
) -> None:
    settings: dict[str, Any] = {"log_cleaner_backoff_ms": 50, "log_level": "warning"}
    if on_disk:
        settings["data_dir"] = tmp_path
        # a key map for about 700 keys (a segment holds all 1,000): each pass cleans up to
        # one more segment, and the next goes on from there
        settings["log_cleaner_dedupe_buffer_size"] = 100_000
    async with running_server(**settings) as server:
        async with await WireClient.connect(server.port) as wire:
            await create_topic(wire, TOPIC, 1, CONFIGS)
        await produce_all(server.port, update_batches())
        assert server.cleaner is not None
        plog = server.broker.topics.partition(TOPIC, 0)
        assert plog is not None
        if on_disk:
            assert plog.store is not None and len(plog.store.segments) > 20

        async def cleaned() -> bool:
            return plog.cleaned_to == UPDATES + DEAD and plog.next_horizon is not None

        await wait_for(cleaned)
        if on_disk:  # the key map's bound made it many passes
            assert server.cleaner.stats.passes > 20, server.cleaner.stats
        first = await read_log(server.port)
        check_latest(first, tombstones=True)
        assert first[-1][1] == b"~roll" and first[-1][0] == UPDATES + DEAD

        async def tombstones_gone() -> bool:
            return plog.next_horizon is None

        await wait_for(tombstones_gone)
        check_latest(await read_log(server.port), tombstones=False)
        if on_disk:
            # the cleaned segments were merged (as Kafka groups them, up to segment.bytes):
            # from over 20 to a few, in the data dir as in the partition's list
            assert plog.store is not None
            segments = plog.store.segments  # type: ignore[attr-defined]
            files = sorted(p.name for p in plog.store.directory.iterdir())  # type: ignore[attr-defined]
            assert [f for f in files if f.endswith(".log")] == [s.path.name for s in segments]
            # (greedy groups: any two next to each other hold more than segment.bytes)
            assert len(segments) <= 6, files
            assert not [f for f in files if f.endswith((".cleaned", ".swap", ".deleted"))]
            # a pass that changes nothing writes nothing (groups of one segment, unchanged):
            # once no more segments can be merged, passes leave the files as they are
            for _ in range(4):
                inodes = [s.path.stat().st_ino for s in plog.store.segments]  # type: ignore[attr-defined]
                plog.cleaned_to = 0  # all of it dirty again
                assert await server.cleaner.clean_once(now_ms() + 1)
                if [s.path.stat().st_ino for s in plog.store.segments] == inodes:  # type: ignore[attr-defined]
                    break
            else:
                raise AssertionError("every pass wrote segments again")
        assert plog.size_bytes < 64 * 1024 + ROLL


async def test_keyless_records_are_refused_by_a_compacted_topic(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, TOPIC, 1, {"cleanup.policy": "compact,delete"})
        await create_topic(wire, "plain", 1)
        now = now_ms()
        batch = _with_null_key(now)
        resp = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, batch)))
        assert resp["error_code"] == 87  # INVALID_RECORD
        assert "Compacted topic cannot accept message without key" in resp["error_message"]
        assert [e["batch_index"] for e in resp["record_errors"]] == [1]  # the keyless record
        plain = only_partition(await wire.request(0, 8, produce_request("plain", 0, batch)))
        assert plain["error_code"] == 0
        good = build_batch([(0, b"k", b"v", now)])
        ok = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, good)))
        assert ok["error_code"] == 0 and ok["base_offset"] == 0
        # compressed batches are read for it too (Kafka's LogValidator decompresses them)
        from tests.support.kafka_wire import build_batch as aiokafka_batch

        for codec in (1, 2, 3, 4):
            packed = aiokafka_batch(
                [(b"k", b"v", [], now), (None, b"v", [], now)], compression=codec
            )
            resp = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, packed)))
            assert resp["error_code"] == 87, (codec, resp)
            packed = aiokafka_batch([(b"k", b"v", [], now)], compression=codec)
            resp = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, packed)))
            assert resp["error_code"] == 0, (codec, resp)
        # one that does not decompress: CORRUPT_MESSAGE (Kafka: an internal error)
        bad = bytearray(aiokafka_batch([(b"k", b"v" * 100, [], now)], compression=4))
        bad[70:80] = b"\xff" * 10
        bad[17:21] = crc32c(memoryview(bad)[21:]).to_bytes(4, "big")
        resp = only_partition(await wire.request(0, 8, produce_request(TOPIC, 0, bytes(bad))))
        assert resp["error_code"] == 2, resp


def _with_null_key(now: int) -> bytes:
    from tests.support.kafka_wire import build_batch as aiokafka_batch

    return aiokafka_batch([(b"k", b"v", [], now), (None, b"v", [], now)])


# --- transactions ---------------------------------------------------------------------------
PID, EPOCH = 7000, 0


def txn_batch(pid: int, records: list[tuple[bytes, bytes]]) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, 1, pid, EPOCH, 0, 1 << 20)
    for i, (k, v) in enumerate(records):
        builder.append(i, now_ms(), k, v, [])
    return bytes(builder.build())


def append(plog: PartitionLog, batch: bytes) -> None:
    stored = bytes(with_base_offset(batch, plog.high_watermark))
    plog.append(stored, parse_header(stored), now_ms())


@pytest.mark.parametrize("on_disk", [True, False], ids=["data-dir", "in-memory"])
async def test_aborted_transactions_are_removed_and_committed_ones_stay(
    tmp_path: Path, on_disk: bool
) -> None:
    settings: dict[str, Any] = {"log_cleaner_enable": False, "log_level": "warning"}
    if on_disk:
        settings["data_dir"] = tmp_path
    async with running_server(**settings) as server:
        async with await WireClient.connect(server.port) as wire:
            configs = {
                "cleanup.policy": "compact",
                "segment.bytes": "300",
                "delete.retention.ms": "100",
            }
            await create_topic(wire, TOPIC, 1, configs)
        plog = server.broker.topics.partition(TOPIC, 0)
        assert plog is not None
        append(plog, build_batch([(0, b"a", b"a0", now_ms()), (1, b"b", b"b0", now_ms())]))
        append(plog, txn_batch(PID, [(b"a", b"a-aborted"), (b"c", b"c-aborted")]))  # 2-3
        append(plog, txn_batch(PID + 1, [(b"b", b"b-committed")]))  # 4
        plog.write_marker(PID, EPOCH, commit=False, coordinator_epoch=0)  # 5
        plog.write_marker(PID + 1, EPOCH, commit=True, coordinator_epoch=0)  # 6
        append(plog, txn_batch(PID, [(b"d", b"d-committed")]))  # 7: a later one, committed
        plog.write_marker(PID, EPOCH, commit=True, coordinator_epoch=0)  # 8
        append(plog, build_batch([(0, b"~roll", b"x" * 400, now_ms())]))  # 9: active
        before_committed = await read_log(server.port, committed=True)
        assert [(o, v) for o, _k, v in before_committed] == [
            (0, b"a0"),
            (1, b"b0"),
            (4, b"b-committed"),
            (7, b"d-committed"),
            (9, b"x" * 400),
        ]

        from kgroupd.broker.log.cleaner import LogCleaner

        cleaner = LogCleaner(server.broker.topics, 50, None)
        try:
            now = now_ms()
            assert await cleaner.clean_once(now)
            uncommitted = await read_log(server.port)
            # the aborted records are gone (a0 stays: the aborted a superseded nothing), b0
            # is superseded by the committed b
            assert [(o, v) for o, _k, v in uncommitted] == [
                (0, b"a0"),
                (4, b"b-committed"),
                (7, b"d-committed"),
                (9, b"x" * 400),
            ]
            assert await read_log(server.port, committed=True) == uncommitted
            # the abort marker stays until delete.retention.ms has passed
            assert [a.last_offset for a in plog.txn.aborted] == [5]
            assert not await cleaner.clean_once(now + 99)
            # then it goes, and its aborted transaction with it: the same producer's later,
            # committed transaction (offset 7) stays visible to read_committed
            assert await cleaner.clean_once(now + 100)
            assert plog.txn.aborted == []
            assert await read_log(server.port) == uncommitted
            assert await read_log(server.port, committed=True) == uncommitted
        finally:
            cleaner.close()
        marker_batches = await _control_offsets(server.port)
        assert marker_batches == [6, 8]  # the commit markers: their records remain
    if on_disk:  # after a restart too (the cleaned index files hold no aborted transaction)
        async with running_server(**settings) as server:
            assert await read_log(server.port, committed=True) == uncommitted
            plog = server.broker.topics.partition(TOPIC, 0)
            assert plog is not None and plog.txn.aborted == []


async def _control_offsets(port: int) -> list[int]:
    """The offsets of every control batch (fetched segment by segment, to the end)."""
    out: list[int] = []
    offset = 0
    async with await WireClient.connect(port) as wire:
        while True:
            body = fetch_request(TOPIC, 0, offset, max_bytes=1 << 20, partition_max_bytes=1 << 20)
            part = only_partition(await wire.request(1, 11, body))
            data = part["records"] or b""
            pos = 0
            while pos < len(data):
                header = parse_header(data, pos)
                if header.attributes & 0x20:
                    out.append(header.base_offset)
                offset = header.base_offset + header.last_offset_delta + 1
                pos += header.length
            if offset >= part["high_watermark"]:
                return out


# --- kill -9 --------------------------------------------------------------------------------
def latest_of(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    return {k: v for _o, k, v in records if k != b"~roll"}


async def test_kill_9_while_cleaning_loses_nothing(tmp_path: Path) -> None:
    """A broker killed while the cleaner writes its ``.cleaned`` files (slowed to 4 MB/s)
    comes back with every key's latest value, no leftover, and cleans again."""
    data = tmp_path / "data"
    part_dir = data / "topics" / f"{TOPIC}-0"
    async with broker_process(data) as broker:
        await broker.start("--log-cleaner-enable", "false")
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, TOPIC, 1, CONFIGS)
        await produce_all(broker.port, update_batches())
        before = await read_log(broker.port)
        assert len(before) == UPDATES + DEAD + 1
        await broker.stop()

        slow = ("--log-cleaner-backoff-ms", "50", "--log-cleaner-io-max-bytes-per-second")
        await broker.start(*slow, "4000000")
        deadline = time.monotonic() + 30
        while not list(part_dir.glob("*.cleaned")):
            assert time.monotonic() < deadline, "the cleaner never wrote a .cleaned file"
            await asyncio.sleep(0.01)
        assert not broker.find("log_cleaned", broker.run_start)  # still cleaning
        await broker.kill()
        assert list(part_dir.glob("*.cleaned"))  # what the crash left

        await broker.start("--log-cleaner-enable", "false")
        assert not list(part_dir.glob("*.cleaned"))
        assert latest_of(await read_log(broker.port)) == expected()
        await broker.stop()

        await broker.start("--log-cleaner-backoff-ms", "50")
        await broker.wait_for_event("log_cleaned", timeout=30)
        check_latest(await read_log(broker.port), tombstones=True)
        await broker.stop()
        # where it cleaned to, and the tombstones' delete horizon, for the next start
        cleaned_to, horizon = (part_dir / "cleaner-offset").read_text().split()
        assert int(cleaned_to) == UPDATES + DEAD and int(horizon) > now_ms()

        # the cleaned segments' index files are taken as they are: nothing is read back
        await broker.start("--log-cleaner-enable", "false")
        (loaded,) = broker.find("topic_data_loaded", since=broker.run_start)
        assert loaded["batches_read"] == 0
        check_latest(await read_log(broker.port), tombstones=True)
        await broker.stop()

        # the cleaned segments have offset gaps: with their index files gone they are read
        # back (and their indexes rebuilt) without being taken for damage
        for idx in part_dir.glob("*.idx"):
            idx.unlink()
        await broker.start("--log-cleaner-enable", "false")
        (loaded,) = broker.find("topic_data_loaded", since=broker.run_start)
        assert loaded["batches_read"] > 0
        check_latest(await read_log(broker.port), tombstones=True)
        await broker.stop()


async def test_kill_9_while_merging_segments_loses_nothing(tmp_path: Path) -> None:
    """segment.bytes raised after the log was written (72 full segments of 32 KiB): the next
    pass cleans them into one (Kafka's grouping), and a broker killed while it writes that
    segment comes back with every key's latest value in the old segments; a clean pass then
    leaves one closed segment."""
    data = tmp_path / "data"
    part_dir = data / "topics" / f"{TOPIC}-0"

    def logs() -> list[Path]:
        return sorted(part_dir.glob("*.log"))

    async with broker_process(data) as broker:
        await broker.start("--log-cleaner-enable", "false")
        async with await WireClient.connect(broker.port) as wire:
            await create_topic(wire, TOPIC, 1, CONFIGS)
            await produce_all(broker.port, update_batches())
            alter = {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": TOPIC,
                        "configs": [
                            {"name": "segment.bytes", "config_operation": 0, "value": "8000000"}
                        ],
                    }
                ],
                "validate_only": False,
            }
            (res,) = (await wire.request(44, 0, alter))["responses"]
            assert res["error_code"] == 0, res
        await broker.stop()
        before = logs()
        assert len(before) > 50

        slow = ("--log-cleaner-backoff-ms", "50", "--log-cleaner-io-max-bytes-per-second")
        await broker.start(*slow, "2000000")
        deadline = time.monotonic() + 30
        while not list(part_dir.glob("*.log.cleaned")):
            assert time.monotonic() < deadline, "the cleaner never wrote a .cleaned file"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # well into the group's segment
        assert not broker.find("log_cleaned", broker.run_start)  # still cleaning
        await broker.kill()
        (cut,) = part_dir.glob("*.log.cleaned")  # what the crash left: one group's segment
        assert cut.name == before[0].name + ".cleaned"

        await broker.start("--log-cleaner-enable", "false")
        assert logs() == before
        assert not [p for p in part_dir.iterdir() if p.suffix in (".cleaned", ".swap")]
        assert latest_of(await read_log(broker.port)) == expected()
        await broker.stop()

        await broker.start("--log-cleaner-backoff-ms", "50")
        await broker.wait_for_event("log_cleaned", timeout=30)
        check_latest(await read_log(broker.port), tombstones=True)
        await broker.stop()
        (event,) = broker.find("log_cleaned", broker.run_start)
        assert event["segments_rewritten"] == len(before) - 1
        assert len(logs()) == 2  # the merged one, and the active segment
        assert sorted(p.name for p in part_dir.iterdir() if ".log" in p.name) == [
            p.name for p in logs()
        ]


# --- topic configs --------------------------------------------------------------------------
def test_compaction_configs_through_create_alter_and_describe() -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
        ResourceType,
    )

    from kgroupd.broker.testing import ThreadedBroker

    with ThreadedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.3",
            "min.compaction.lag.ms": "1000",
            "max.compaction.lag.ms": "600000",
            "delete.retention.ms": "5000",
        }
        admin.create_topics([NewTopic("cfg", 1, 1, config=configs)])["cfg"].result(10)
        bad = NewTopic("bad", 1, 1, config={"min.cleanable.dirty.ratio": "2"})
        with pytest.raises(KafkaException) as info:
            admin.create_topics([bad])["bad"].result(10)
        assert info.value.args[0].name() == "INVALID_CONFIG"

        def described() -> dict[str, Any]:
            res = ConfigResource(ResourceType.TOPIC, "cfg")
            return dict(admin.describe_configs([res])[res].result(10))

        got = described()
        for k, v in configs.items():
            assert got[k].value == v and got[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        res = ConfigResource(
            ResourceType.TOPIC,
            "cfg",
            incremental_configs=[
                ConfigEntry(
                    "delete.retention.ms", "0", incremental_operation=AlterConfigOpType.SET
                ),
                ConfigEntry(
                    "min.cleanable.dirty.ratio",
                    None,
                    incremental_operation=AlterConfigOpType.DELETE,
                ),
            ],
        )
        admin.incremental_alter_configs([res])[res].result(10)
        got = described()
        assert got["delete.retention.ms"].value == "0"
        assert got["min.cleanable.dirty.ratio"].value == "0.5"  # Kafka's default
        assert got["min.cleanable.dirty.ratio"].source == ConfigSource.DEFAULT_CONFIG.value
