"""Consumer groups with the real aiokafka client against a real in-process broker: what a
group processes and commits (three consumers, 30,000 records, a clean restart), and its
committed offsets as users and admins see them. Members coming and going, static members and
subscriptions: ``test_groups_aiokafka_rebalances.py``; what both share (fixtures, ``Worker``):
``tests.support.aiokafka_groups``.

Every client uses ``metadata_max_age_ms=1000`` so topic changes are seen within a second,
and consumers heartbeat every 200 ms so a rebalance the broker starts is noticed promptly.
The broker runs with a 200 ms initial rebalance delay and a 1000 ms minimum session
timeout, so session expiry can be exercised in a couple of seconds.

Conditions the client signals with no event (a consumer's assignment, a group's state as
DescribeGroups reports it) are polled with a bounded deadline (``wait_until``).
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

from kgroupd.protocol.errors import ErrorCode
from tests.support import aiokafka_groups
from tests.support.aiokafka_groups import (
    META_AGE_MS,
    Batch,
    Ledger,
    Worker,
    create_topic,
    start_workers,
    stop_workers,
    wait_settled,
)
from tests.support.groups import (
    DELETE_GROUPS,
    RawConnection,
    decode_assignment,
    struct_to_dict,
    wait_until,
)

server, bootstrap, admin, raw = aiokafka_groups.FIXTURES  # this module's fixtures


# --------------------------------------------------------------------------------------------
# Three consumers, 30,000 records, a clean restart


async def produce(
    bootstrap: str, topic: str, count: int, produced: dict[tuple[int, int], bytes]
) -> None:
    """Send ``count`` records in paced chunks, recording where each one landed."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS, linger_ms=5
    )
    await producer.start()
    try:
        for start in range(0, count, 1000):
            values = [b"%d" % i for i in range(start, min(start + 1000, count))]
            futures = [await producer.send(topic, v) for v in values]
            for v, meta in zip(values, await asyncio.gather(*futures), strict=True):
                produced[(meta.partition, meta.offset)] = v
            await asyncio.sleep(0.02)  # pacing: consumption and commits interleave
    finally:
        await producer.stop()


async def committed_offsets(admin: AIOKafkaAdminClient, group: str) -> dict[int, int]:
    return {
        tp.partition: om.offset
        for tp, om in (await admin.list_consumer_group_offsets(group)).items()
    }


async def test_three_consumers_share_six_partitions_and_process_30000_records(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """Accounting rule asserted (at-least-once with committed progress never re-read):

    * every produced record (partition, offset) is processed, with the value produced there;
    * while the group is stable nothing is processed twice and every commit succeeds;
    * a record processed more than once was, at every sighting but its last, in a batch whose
      commit did not succeed (failed because the group had moved on, or never made because
      the consumer stopped first): no record of a successfully committed batch is re-read;
    * after all members stop cleanly and start again, each partition resumes exactly at the
      offset the group committed, and the records read again are exactly those of the last
      batches the stopped members processed without committing.
    """
    topic, group, total = "g3-events", "g3", 30_000
    await create_topic(admin, topic, 6)
    ledger = Ledger()
    produced: dict[tuple[int, int], bytes] = {}

    # Phase 1: three members settle, then records flow while they consume and commit.
    first = await start_workers(
        [
            Worker(
                f"c{i}",
                bootstrap,
                group,
                (topic,),
                ledger=ledger,
                phase=1,
                leave_last_uncommitted=True,
            )
            for i in range(3)
        ]
    )
    producing = None
    try:
        await wait_settled(first, topic, 6, raw, group)
        calls_when_settled = [w.tracker.calls for w in first]
        producing = asyncio.create_task(produce(bootstrap, topic, total, produced))
        await wait_until(
            lambda: len(ledger.seen(1)) >= total // 3, 30, "a third of the records processed"
        )
        # No rebalance while the group is stable: no callbacks, no failed commits.
        assert [w.tracker.calls for w in first] == calls_when_settled
        assert ledger.commit_errors == []
    finally:
        await stop_workers(first)
    seen1 = [(b.partition, o) for b in ledger.batches if b.phase == 1 for o in b.offsets]
    assert len(seen1) == len(set(seen1)), "a record was processed twice in a stable group"
    assert ledger.commit_errors == []

    # The group is down: its committed offsets are exactly what the members committed.
    assert producing is not None
    committed = await committed_offsets(admin, group)
    expected: dict[int, int] = {}
    for b in ledger.batches:
        if b.committed:
            expected[b.partition] = max(expected.get(b.partition, 0), b.offsets[-1] + 1)
    assert committed == expected
    uncommitted = {(b.partition, o) for b in ledger.batches if b.final for o in b.offsets}
    assert uncommitted, "no member stopped with a batch uncommitted: nothing to check"
    assert all(o >= committed.get(p, 0) for p, o in uncommitted)

    # Phase 2: the same group starts again while the producer is still running.
    second = await start_workers(
        [Worker(f"d{i}", bootstrap, group, (topic,), ledger=ledger, phase=2) for i in range(3)]
    )
    try:
        await wait_settled(second, topic, 6, raw, group)
        await producing
        assert len(produced) == total
        await wait_until(
            lambda: ledger.seen() >= produced.keys(), 30, "every produced record processed"
        )
    finally:
        await stop_workers(second)

    # Everything produced was processed, with the value produced at that offset.
    for b in ledger.batches:
        for o, v in zip(b.offsets, b.values, strict=True):
            assert produced[(b.partition, o)] == v
    assert ledger.seen() == produced.keys()
    assert {v for b in ledger.batches for v in b.values} == {b"%d" % i for i in range(total)}

    # Only records of batches that were never committed are ever processed again.
    sightings: dict[tuple[int, int], list[Batch]] = defaultdict(list)
    for b in ledger.batches:
        for o in b.offsets:
            sightings[(b.partition, o)].append(b)
    for key, seen_in in sightings.items():
        for earlier in seen_in[:-1]:
            assert earlier.committed is not True, f"{key} re-read after its batch was committed"

    # After the restart each partition resumed exactly at the committed offset, and the
    # records read again are exactly the uncommitted last batches of the stopped members.
    first_in_phase2: dict[int, int] = {}
    for b in ledger.batches:
        if b.phase == 2:
            first_in_phase2.setdefault(b.partition, b.offsets[0])
    for p in range(6):
        assert first_in_phase2[p] == committed.get(p, 0), f"partition {p} did not resume"
    reread = ledger.seen(1) & ledger.seen(2)
    assert reread == uncommitted

    # The last members committed everything they processed: the group is at the end.
    ends = Counter(p for p, _ in produced)
    assert await committed_offsets(admin, group) == dict(ends)


# --------------------------------------------------------------------------------------------
# Offsets as users see them


async def admin_describe(admin: AIOKafkaAdminClient, group: str) -> dict[str, Any]:
    """``describe_consumer_groups`` of one group, as a dict (whatever version was used)."""
    (resp,) = await admin.describe_consumer_groups([group])
    (found,) = struct_to_dict(resp)["groups"]
    assert found["group"] == group
    return found


async def test_committed_offsets_as_users_and_admins_see_them(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    topic, group = "offsets-events", "offsets"
    await create_topic(admin, topic, 2)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
    await producer.start()
    try:
        for i in range(10):
            for p in (0, 1):
                await producer.send(topic, b"%d-%d" % (p, i), partition=p)
        await producer.flush()
    finally:
        await producer.stop()
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    first = await Worker("o1", bootstrap, group, (topic,)).start(run=False)
    try:
        await wait_settled([first], topic, 2, raw, group)
        await first.consumer.commit(
            {tp0: OffsetAndMetadata(3, "three"), tp1: OffsetAndMetadata(7, "seven")}
        )
        assert await first.consumer.committed(tp0) == 3
        assert await first.consumer.committed(tp1) == 7

        # The admin client agrees while the group is active ...
        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets == {tp0: OffsetAndMetadata(3, "three"), tp1: OffsetAndMetadata(7, "seven")}
        described = await admin_describe(admin, group)
        assert (described["error_code"], described["state"]) == (0, "Stable")
        assert (described["group"], described["protocol_type"]) == (group, "consumer")
        assert described["protocol"] in ("range", "roundrobin")
        assert [(m["member_id"], m["client_id"]) for m in described["members"]] == [
            (first.member_id, "o1")
        ]
        (member,) = described["members"]
        assert decode_assignment(member["member_assignment"]) == {topic: [0, 1]}
        assert (group, "consumer") in await admin.list_consumer_groups()

        # ... and a member cannot be deleted from under it.
        resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
        assert resp["results"] == [{"group_id": group, "error_code": ErrorCode.NON_EMPTY_GROUP}]
    finally:
        await first.stop()

    # A fresh consumer of the same group starts from the committed offsets.
    fresh = await Worker("o2", bootstrap, group, (topic,)).start()
    try:
        await wait_until(
            lambda: sum(len(b.offsets) for b in fresh.ledger.batches) >= 10,
            10,
            "the fresh consumer to read the rest",
        )
        firsts: dict[int, int] = {}
        for b in fresh.ledger.batches:
            firsts.setdefault(b.partition, b.offsets[0])
        assert firsts == {0: 3, 1: 7}
        assert sorted((b.partition, o) for b in fresh.ledger.batches for o in b.offsets) == [
            (p, o) for p in (0, 1) for o in range(3 if p == 0 else 7, 10)
        ]
    finally:
        await fresh.stop()

    # Empty now: described as such, listed, and its offsets are what the fresh one committed.
    described = await admin_describe(admin, group)
    assert (described["state"], described["members"]) == ("Empty", [])
    offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: om.offset for tp, om in offsets.items()} == {tp0: 10, tp1: 10}
    assert (group, "consumer") in await admin.list_consumer_groups()

    # Deleting it removes it from every view; deleting it again: GROUP_ID_NOT_FOUND.
    resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
    assert resp["results"] == [{"group_id": group, "error_code": 0}]
    assert group not in [g for g, _ in await admin.list_consumer_groups()]
    assert await admin.list_consumer_group_offsets(group) == {}
    described = await admin_describe(admin, group)
    assert (described["error_code"], described["state"]) == (0, "Dead")
    resp = await raw.call(DELETE_GROUPS, 1, groups_names=[group])
    assert resp["results"] == [{"group_id": group, "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]
