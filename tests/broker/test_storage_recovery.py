"""Start-up over damaged data files (issue 4): each damage gets its documented outcome.

The data is written by a real broker subprocess (offset commits over the wire, record
batches produced with acks=-1), which is then killed (so the coordinator log is left as
written) or stopped (so a snapshot is written); the test damages a file the way a crash or a
bad disk would and starts the broker again:

- a torn tail (half an entry or half a record batch at the end of the last file) is cut
  with a ``torn_tail_cut`` warning naming the file and offset, and what precedes survives;
- damage followed by more data (a flipped byte in the middle) makes start-up refuse with
  exit code 2 and a message naming the file and the byte offset, touching nothing; with
  ``--recover`` it starts, keeps what precedes the damage and logs ``recovered_damaged_file``
  with how much was dropped;
- a truncated snapshot is refused the same way (``--recover`` keeps what precedes);
- a snapshot or log from a future format version is refused as newer, even with --recover;
- a data dir made with another ``--offsets-partitions`` or cluster id, or locked by a running
  broker, is refused.

And, on the store itself: a write whose answer waits for "the fsync" gets one that covers it,
even when another request's flush already asked for it.
"""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import pytest

from kgroupd.broker.coordinator import CoordinatorConfig, CoordinatorShard, ManualTimers
from kgroupd.broker.coordinator.records import (
    GroupMetadataRecord,
    MemberRecord,
    OffsetCommitRecord,
    OffsetTombstoneRecord,
)
from kgroupd.broker.storage.coordinator_store import CoordinatorStore, file_records
from kgroupd.broker.storage.entries import (
    ENTRY_HEADER,
    FILE_HEADER,
    FORMAT_VERSION,
    KIND_RECORD_LOG,
    KIND_SNAPSHOT,
    entry,
    scan,
)
from kgroupd.broker.storage.fsync import FsyncWorker
from kgroupd.protocol.records import HEADER_SIZE, parse_header
from tests.broker.storage_helpers import BROKER_ARGS, GROUP, PARTITIONS, TOPIC, commit, committed
from tests.support.broker_process import (
    BrokerProcess,
    broker_process,
    fetch_committed,
    read_partition,
)
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request

SEG_TOPIC = "seg"


# --- writing data through the broker ----------------------------------------------------------


async def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> list[int]:
    """One batch per value, acks=-1, to partition 0; the offsets they got."""
    offsets = []
    async with await WireClient.connect(broker.port) as wire:
        for value in values:
            batch = build_batch([(None, value, [])])
            resp = await wire.request(0, 8, produce_request(topic, 0, batch))
            ((part,),) = [t["partition_responses"] for t in resp["responses"]]
            assert part["error_code"] == 0, part
            offsets.append(part["base_offset"])
    return offsets


async def create_segmented_topic(broker: BrokerProcess, segment_bytes: int) -> None:
    async with await WireClient.connect(broker.port) as wire:
        await create_topic(wire, SEG_TOPIC, 1, {"segment.bytes": str(segment_bytes)})


# --- reading the files the way the broker does ------------------------------------------------


def coordinator_log(data: Path) -> Path:
    """The one non-empty coordinator log (the test commits to one shard)."""
    logs = [p for p in (data / "coordinator").glob("log-*.log") if p.stat().st_size > 8]
    assert len(logs) == 1, logs
    return logs[0]


def entry_spans(path: Path, kind: int) -> list[tuple[int, int]]:
    """(start, end) byte offsets of every entry of a well-formed file."""
    data = path.read_bytes()
    assert not scan(str(path), data, kind).dropped_bytes
    spans, pos = [], FILE_HEADER.size
    while pos < len(data):
        (length, _crc) = ENTRY_HEADER.unpack_from(data, pos)
        spans.append((pos, pos + ENTRY_HEADER.size + length))
        pos += ENTRY_HEADER.size + length
    return spans


def offsets_in(path: Path, up_to: int, group: str = GROUP) -> dict[int, int]:
    """The committed offsets of ``group``/TOPIC the entries before byte ``up_to`` leave."""
    out: dict[int, int] = {}
    for record in file_records(path, path.read_bytes()[:up_to]):
        if isinstance(record, OffsetCommitRecord) and record.group_id == group:
            out[record.partition] = record.offset
        elif isinstance(record, OffsetTombstoneRecord) and record.group_id == group:
            out.pop(record.partition, None)
    return out


def batch_spans(path: Path) -> list[tuple[int, int, int]]:
    """(start, end, base offset) of every record batch in a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        out.append((pos, pos + header.length, header.base_offset))
        pos += header.length
    return out


def flip_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))


def segment_files(data: Path, topic: str) -> list[Path]:
    return sorted((data / "topics" / f"{topic}-0").glob("*.log"))


# --- coordinator logs -----------------------------------------------------------------------------


async def test_a_torn_tail_in_a_coordinator_log_is_cut_and_what_precedes_survives(
    broker: BrokerProcess,
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    for n in range(1, 6):
        await commit(broker, {0: n, 1: 10 * n})
    await broker.kill()
    log_path = coordinator_log(data)
    size = log_path.stat().st_size
    half = entry(b'{"v":1,"type":"offset_commit","group_id":"g","topic":"t","partition":0}')
    with open(log_path, "ab") as f:
        f.write(half[: len(half) // 2])

    await broker.start()
    cut = broker.find("torn_tail_cut", file=str(log_path))
    assert cut and cut[0]["offset"] == size and cut[0]["level"] == "warning", cut
    assert cut[0]["bytes_dropped"] == len(half) // 2
    assert log_path.stat().st_size == size
    assert await committed(broker) == {0: 5, 1: 50}

    # The log goes on after the cut: a later commit survives the next crash.
    await commit(broker, {0: 6})
    await broker.kill()
    await broker.start()
    assert not broker.find("torn_tail_cut", since=broker.run_start)
    assert await committed(broker) == {0: 6, 1: 50}
    await broker.stop()


# Where in the damaged entry the byte flips: its payload, its CRC, its length (a length that
# now runs past the end of the file must not pass for a torn tail: entries follow it).
ENTRY_FLIPS = {
    "payload": lambda start, end: (start + ENTRY_HEADER.size + end) // 2,
    "crc": lambda start, end: start + 6,
    "length": lambda start, end: start + 1,
}


@pytest.mark.parametrize("where", list(ENTRY_FLIPS))
async def test_a_flipped_byte_in_a_coordinator_log_is_refused_unless_recover(
    broker: BrokerProcess, where: str
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    for n in range(1, 7):
        await commit(broker, {n % 2: n})
    await broker.kill()
    log_path = coordinator_log(data)
    spans = entry_spans(log_path, KIND_RECORD_LOG)
    assert len(spans) >= 6
    # Damage in the middle: an entry with three more after it.
    start, end = spans[-4]
    flip_byte(log_path, ENTRY_FLIPS[where](start, end))
    damaged = log_path.read_bytes()

    code, err = await broker.run_refused()
    assert code == 2, err
    assert "kgroupd: error:" in err and str(log_path) in err
    assert f"byte offset {start}" in err and "--recover" in err
    assert log_path.read_bytes() == damaged, "a refused start-up changed the file"

    await broker.start("--recover")
    (recovered,) = broker.find("recovered_damaged_file", file=str(log_path))
    assert recovered["offset"] == start
    assert recovered["bytes_dropped"] == len(damaged) - start
    assert recovered["level"] == "warning"
    expected = offsets_in(log_path, start)
    assert expected  # something precedes the damage
    assert await committed(broker) == expected
    await broker.stop()
    # Recovered for good: a plain restart needs no --recover.
    await broker.start()
    assert await committed(broker) == expected
    await broker.stop()


async def test_a_truncated_snapshot_is_refused_and_recover_keeps_what_precedes(
    broker: BrokerProcess,
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    await commit(broker, {0: 9, 1: 8}, group="first")
    await commit(broker, {0: 3, 1: 4, 2: 5, 3: 6})
    await commit(broker, {2: 7})
    await broker.stop()  # a clean stop snapshots the shard and deletes its log
    snapshot = data / "coordinator" / "shard-00.snapshot"
    assert not [p for p in (data / "coordinator").glob("*.log") if p.stat().st_size > 8]
    spans = entry_spans(snapshot, KIND_SNAPSHOT)
    # The header, then one offset block per (group, topic): "first"'s, then GROUP's, last.
    assert len(spans) == 3
    assert offsets_in(snapshot, spans[-1][1]) == {0: 3, 1: 4, 2: 7, 3: 6}
    assert offsets_in(snapshot, spans[-1][0]) == {}
    assert offsets_in(snapshot, spans[-1][0], group="first") == {0: 9, 1: 8}
    last_start, last_end = spans[-1]
    with open(snapshot, "r+b") as f:
        f.truncate(last_end - 5)
    truncated = snapshot.read_bytes()

    code, err = await broker.run_refused()
    assert code == 2, err
    assert str(snapshot) in err and f"byte offset {last_start}" in err
    assert snapshot.read_bytes() == truncated

    await broker.start("--recover")
    (recovered,) = broker.find("recovered_damaged_file", file=str(snapshot))
    assert recovered["offset"] == last_start
    assert recovered["bytes_dropped"] == len(truncated) - last_start
    # What precedes the cut entry is kept; the cut block (GROUP's offsets) is gone.
    assert await committed(broker) == {}
    first = await fetch_committed(broker.port, "first", TOPIC, list(range(PARTITIONS)))
    assert first == {0: (9, "m9"), 1: (8, "m8")}
    await broker.stop()


@pytest.mark.parametrize("which", ["snapshot", "log"])
async def test_a_file_from_a_future_format_version_is_refused_as_newer(
    broker: BrokerProcess, which: str
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    await commit(broker, {0: 1})
    if which == "snapshot":
        await broker.stop()
        path = data / "coordinator" / "shard-00.snapshot"
    else:
        await broker.kill()
        path = coordinator_log(data)
    raw = bytearray(path.read_bytes())
    magic, version, _kind = FILE_HEADER.unpack_from(raw, 0)
    assert (magic, version) == (b"KGRD", FORMAT_VERSION)
    struct.pack_into(">H", raw, 4, FORMAT_VERSION + 1)
    path.write_bytes(bytes(raw))

    for extra in ((), ("--recover",)):  # --recover never drops data it cannot read
        code, err = await broker.run_refused(*extra)
        assert code == 2, err
        assert str(path) in err
        assert f"format version {FORMAT_VERSION + 1} is newer" in err
        assert path.read_bytes() == raw


# --- topic segments -------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", ["30 bytes", "half"])
async def test_a_torn_tail_in_a_segment_is_cut_and_every_record_before_it_survives(
    broker: BrokerProcess, keep: str
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    values = [f"value-{i}".encode() * 20 for i in range(5)]
    assert await produce(broker, TOPIC, values) == [0, 1, 2, 3, 4]
    await broker.kill()
    (segment,) = segment_files(data, TOPIC)
    size = segment.stat().st_size
    torn = build_batch([(None, b"x" * 300, [])])
    kept = 30 if keep == "30 bytes" else len(torn) // 2
    assert (kept < HEADER_SIZE) == (keep == "30 bytes")
    with open(segment, "ab") as f:
        f.write(torn[:kept])

    await broker.start()
    (cut,) = broker.find("torn_tail_cut", file=str(segment))
    assert (cut["offset"], cut["bytes_dropped"], cut["level"]) == (size, kept, "warning")
    assert segment.stat().st_size == size
    records, high_watermark = await read_partition(broker.port, TOPIC, 0)
    assert (records, high_watermark) == (dict(enumerate(values)), 5)

    # Appends go on right after the cut, and survive the next crash.
    assert await produce(broker, TOPIC, [b"after"]) == [5]
    await broker.kill()
    await broker.start()
    records, high_watermark = await read_partition(broker.port, TOPIC, 0)
    assert (records, high_watermark) == ({**dict(enumerate(values)), 5: b"after"}, 6)
    await broker.stop()


# Where in the damaged batch the byte flips: its records and its CRC (under the CRC check),
# its length (running past the end of the file, with batches after it: not a torn tail) and
# its base offset (outside the CRC, as in Kafka, but then the offsets do not follow on).
BATCH_FLIPS = {
    "records": HEADER_SIZE + 5,
    "crc": 18,
    "length": 9,
    "base offset": 7,
}


@pytest.mark.parametrize(
    ("where", "segment"),
    [
        ("records", "first"),
        ("crc", "last"),
        ("length", "first"),
        ("length", "last"),
        ("base offset", "first"),
    ],
)
async def test_a_flipped_byte_in_an_earlier_batch_is_refused_unless_recover(
    broker: BrokerProcess, where: str, segment: str
) -> None:
    data = Path(broker.data_dir)
    await broker.start()
    # Small segments: a few batches per file, so the damage (in the second batch of the first
    # or the last file) has batches after it in its own file, and in the first file more
    # files after that.
    await create_segmented_topic(broker, 1024)
    values = [f"record-{i:02d}".encode() * 20 for i in range(12)]
    assert await produce(broker, SEG_TOPIC, values) == list(range(12))
    await broker.kill()
    files = segment_files(data, SEG_TOPIC)
    assert len(files) >= 3, files
    index = 0 if segment == "first" else len(files) - 1
    damaged = files[index]
    spans = batch_spans(damaged)
    assert len(spans) >= 3
    start, _end, base = spans[1]
    flip_byte(damaged, start + BATCH_FLIPS[where])
    before = {p: p.read_bytes() for p in files}

    code, err = await broker.run_refused()
    assert code == 2, err
    assert str(damaged) in err and f"byte offset {start}" in err and "--recover" in err
    assert {p: p.read_bytes() for p in segment_files(data, SEG_TOPIC)} == before

    await broker.start("--recover")
    (recovered,) = broker.find("recovered_damaged_file", file=str(damaged))
    assert recovered["offset"] == start
    assert recovered["bytes_dropped"] == len(before[damaged]) - start
    dropped = {e["file"] for e in broker.find("segment_dropped_after_damage")}
    assert dropped == {str(p) for p in files[index + 1 :]}
    assert segment_files(data, SEG_TOPIC) == files[: index + 1]
    records, high_watermark = await read_partition(broker.port, SEG_TOPIC, 0)
    assert (records, high_watermark) == (dict(enumerate(values[:base])), base)
    assert await produce(broker, SEG_TOPIC, [b"next"]) == [base]
    await broker.stop()


# --- the data directory -----------------------------------------------------------------------


async def test_another_offsets_partitions_or_cluster_id_is_refused(tmp_path: Path) -> None:
    async with broker_process(tmp_path / "data", args=("--offsets-partitions", "3")) as broker:
        listening = await broker.start()
        cluster_id = listening["cluster_id"]
        await broker.stop()
        meta = json.loads((tmp_path / "data" / "meta.json").read_text())
        assert (meta["offsets_partitions"], meta["cluster_id"]) == (3, cluster_id)

        code, err = await broker.run_refused("--offsets-partitions", "50")
        assert code == 2, err
        assert "created with --offsets-partitions 3, not 50" in err

        code, err = await broker.run_refused("--cluster-id", "some-other-cluster")
        assert code == 2, err
        assert f"belongs to cluster {cluster_id}" in err

        # Neither refusal changed the directory: the right flags still start it.
        assert (await broker.start())["cluster_id"] == cluster_id
        await broker.stop()


async def test_a_second_broker_on_the_same_data_dir_refuses(broker: BrokerProcess) -> None:
    await broker.start()
    await commit(broker, {0: 1})
    async with broker_process(broker.data_dir, args=BROKER_ARGS) as second:
        code, err = await second.run_refused()
    assert code == 2, err
    assert f"data dir {broker.data_dir} is in use by another kgroupd" in err
    # The first one is untouched and keeps serving.
    await commit(broker, {0: 2})
    assert await committed(broker) == {0: 2}
    await broker.stop()


# --- the fsync an answer waits for ------------------------------------------------------------


async def test_a_write_gets_the_fsync_in_flight_for_it_not_none(tmp_path: Path) -> None:
    """The leader's SyncGroup emits its group record in the handler but asks the store what
    to wait for later, from the task that sends the reply. If another request's flush wrote
    that record in between and took the fsync future, the SyncGroup must still get a future
    that resolves only after that fsync, not None (which sends the reply at once)."""
    worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
    store = CoordinatorStore(tmp_path, 2, worker, 1 << 20, recover=False)
    try:
        store.load([CoordinatorShard(p, CoordinatorConfig(), ManualTimers()) for p in range(2)])
        member = MemberRecord("m-1", None, "c", "/127.0.0.1", 10000, 10000, "consumer", (), b"a")
        group = GroupMetadataRecord("g", "consumer", 1, "range", "m-1", 0, (member,))
        store.sink_for(0)(group)  # the SyncGroup's record; its reply waits in a task
        store.sink_for(1)(OffsetCommitRecord("h", "t", 0, 5, -1, "", 0, None))
        other = store.flush()  # another request's commit: writes both, takes the fsync
        assert other is not None and not other.done()
        mine = store.flush()  # the SyncGroup's task: what must its reply wait for?
        assert mine is not None, "the reply would go out before any fsync of its record"
        await asyncio.wait_for(asyncio.gather(mine, other), 10)
    finally:
        await store.finish(store.capture())
        worker.close()


async def test_offsets_pending_in_a_transaction_survive_a_snapshot_and_a_restart(
    tmp_path: Path,
) -> None:
    """Pending transactional offsets are written to the log and into snapshots; the marker
    removes them from both, so a restart keeps exactly the still-pending ones pending."""
    from kgroupd.broker.coordinator import OffsetCommitPartition, OffsetCommitTopic, TxnOffsetCommit

    async def run(step: int) -> CoordinatorShard:
        worker = FsyncWorker(asyncio.get_running_loop(), "always", 1000)
        store = CoordinatorStore(tmp_path, 1, worker, 1 << 20, recover=False)
        shard = CoordinatorShard(0, CoordinatorConfig(offsets_partitions=1), ManualTimers())
        try:
            store.load([shard])
            store.offsets_of = lambda _p: [
                (g, t, dict(parts))
                for g, topics in shard.offsets.items()
                for t, parts in topics.items()
            ]
            shard.sink = store.sink_for(0)
            shard.persisting = True
            if step == 0:
                for pid, part in ((7, 0), (8, 1)):
                    topics = (OffsetCommitTopic("t", (OffsetCommitPartition(part, 50, -1, ""),)),)
                    cmd = TxnOffsetCommit("tx", "g", pid, 0, topics)
                    assert shard.txn_commit_offsets(cmd).errors()[("t", part)] == 0
                shard.complete_txn_offsets(8, commit=True)
        finally:
            await store.finish(store.capture())  # clean stop: a snapshot
            worker.close()
        return shard

    await run(0)
    loaded = await run(1)
    assert set(loaded.pending_txn["g"]) == {7}
    assert loaded.committed("g")[("t", 1)].offset == 50
    assert ("t", 0) not in loaded.committed("g")
