"""What moves partitions among aiokafka consumers of a group, and what does not: a member
that closes hands its partitions over at once, one killed keeps them until its session
expires, a static member that restarts gets them back with no rebalance, and a subscription
sees a topic's new partitions and new topics matching its pattern.

The broker and clients are set up as in ``test_groups_aiokafka.py``
(``tests.support.aiokafka_groups``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from tests.support import aiokafka_groups
from tests.support.aiokafka_groups import (
    HEARTBEAT_MS,
    META_AGE_MS,
    Worker,
    create_topic,
    partitions_settled,
    parts,
    start_workers,
    stop_workers,
    wait_settled,
)
from tests.support.groups import RawConnection, describe_group, wait_until

server, bootstrap, admin, raw = aiokafka_groups.FIXTURES  # this module's fixtures


# --------------------------------------------------------------------------------------------
# Members leaving and dying


async def test_member_that_closes_hands_its_partitions_over_at_once(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """A closing consumer sends LeaveGroup: the others take over long before its session
    (30 s here) could have expired."""
    topic, group = "leave-events", "leave"
    await create_topic(admin, topic, 6)
    workers = await start_workers(
        [Worker(f"l{i}", bootstrap, group, (topic,), session_timeout_ms=30_000) for i in range(3)],
        run=False,
    )
    try:
        await wait_settled(workers, topic, 6, raw, group)
        leaving, staying = workers[0], workers[1:]
        gone_id, gone_parts = leaving.member_id, parts(leaving.assignment(topic), topic)
        generation = staying[0].generation
        calls = [w.tracker.calls for w in staying]
        await leaving.stop()
        took = await wait_settled(staying, topic, 6, raw, group, timeout=5.0)
        assert gone_id not in took.members
        # Each partition of the member that left went to one of the others.
        taken = sorted(p for w in staying for p in parts(w.assignment(topic), topic))
        assert set(gone_parts) <= set(taken)
        assert all(w.generation > generation for w in staying)
        assert all(w.tracker.calls > c for w, c in zip(staying, calls, strict=True))
    finally:
        await stop_workers(workers)  # stopping a stopped consumer does nothing


VICTIM = """
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer

async def main(bootstrap, group, topic, session_ms, heartbeat_ms):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id="victim",
        metadata_max_age_ms=1000, heartbeat_interval_ms=heartbeat_ms,
        session_timeout_ms=session_ms, enable_auto_commit=False,
    )
    await consumer.start()
    consumer.subscribe([topic])
    last = None
    while True:
        await consumer.getmany(timeout_ms=50)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != last:
            last = now
            print(json.dumps({"member_id": consumer._coordinator.member_id,
                              "partitions": now}), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
"""


async def test_member_killed_without_leaving_loses_its_partitions_after_session_timeout(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    """A consumer process killed with SIGKILL sends no LeaveGroup and its sockets just drop:
    the broker keeps it a member until its session timeout has passed, then the others take
    its partitions."""
    topic, group, session_ms = "kill-events", "kill", 2000
    await create_topic(admin, topic, 6)
    loop = asyncio.get_running_loop()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        VICTIM,
        bootstrap,
        group,
        topic,
        str(session_ms),
        str(HEARTBEAT_MS),
        stdout=asyncio.subprocess.PIPE,
    )
    victim: dict[str, Any] = {}  # the victim's member id and partitions, as it prints them

    async def follow_victim() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            victim.update(json.loads(line))

    following = asyncio.create_task(follow_victim())
    survivors: list[Worker] = []
    try:
        survivors = await start_workers(
            [
                Worker(f"k{i}", bootstrap, group, (topic,), session_timeout_ms=session_ms)
                for i in range(2)
            ],
            run=False,
        )

        async def victim_settled() -> bool:
            if not all(w.assignment(topic) for w in survivors):
                return False
            view = await describe_group(raw, group)
            if view.state != "Stable" or view.partitions(topic) != list(range(6)):
                return False
            vid = victim.get("member_id")
            return (
                vid in view.members
                and set(view.members) == {vid} | {w.member_id for w in survivors}
                and view.members[vid].assignment.get(topic) == victim["partitions"]
                and all(
                    view.members[w.member_id].assignment.get(topic)
                    == parts(w.assignment(topic), topic)
                    for w in survivors
                )
            )

        await wait_until(victim_settled, 20, "three members, the victim owning partitions")
        victim_parts = victim["partitions"]
        generation = survivors[0].generation

        proc.kill()
        killed_at = loop.time()
        await proc.wait()

        # Half the session later the broker still counts it a member: its connections closed,
        # but Kafka removes a member on session expiry only. (A sleep: absence is observed.)
        await asyncio.sleep(session_ms / 2000)
        view = await describe_group(raw, group)
        assert victim["member_id"] in view.members and view.state == "Stable"
        assert all(w.generation == generation for w in survivors)

        await wait_until(
            lambda: partitions_settled(survivors, topic, 6), 10, "the survivors to take over"
        )
        moved_after = loop.time() - killed_at
        # The last heartbeat came about one interval before the kill (three, to allow for a
        # loaded machine): the move waited for the session, not for the disconnect.
        assert moved_after >= (session_ms - 3 * HEARTBEAT_MS) / 1000, moved_after
        assert moved_after < (session_ms + 4000) / 1000, moved_after
        view = await wait_settled(survivors, topic, 6, raw, group)
        assert victim["member_id"] not in view.members
        owned = sorted(p for w in survivors for p in parts(w.assignment(topic), topic))
        assert set(victim_parts) <= set(owned)
        assert all(w.generation > generation for w in survivors)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        await stop_workers(survivors)


# --------------------------------------------------------------------------------------------
# Static membership


@pytest.mark.parametrize("who", ["leader", "follower"])
async def test_static_member_restart_keeps_partitions_without_rebalance(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection, who: str
) -> None:
    """A static member (group_instance_id) that restarts within its session timeout gets its
    partitions back at once: same generation, and the others see no rebalance at all, not
    even after the old instance's session timeout has passed. Restarting the leader is the
    harder case: the broker names the old leader id, so the new instance acts as a follower
    and takes the stored assignment instead of computing one."""
    topic, group, session_ms = f"static-{who}-events", f"static-{who}", 3000
    await create_topic(admin, topic, 6)

    def static(instance: str) -> Worker:
        return Worker(
            instance,
            bootstrap,
            group,
            (topic,),
            group_instance_id=instance,
            session_timeout_ms=session_ms,
        )

    workers = await start_workers([static(n) for n in ("sa", "sb", "sc")], run=False)
    started = list(workers)  # everything to stop at the end
    try:
        before = await wait_settled(workers, topic, 6, raw, group)
        assert {m.group_instance_id for m in before.members.values()} == {"sa", "sb", "sc"}
        generation = workers[0].generation
        assert all(w.generation == generation for w in workers)
        assert sum(w.is_leader for w in workers) == 1
        old = next(w for w in workers if w.is_leader == (who == "leader"))
        others = [w for w in workers if w is not old]
        old_parts = parts(old.assignment(topic), topic)
        old_id = old.member_id
        calls = [w.tracker.calls for w in others]
        others_ids = {w.member_id for w in others}

        await old.stop()  # a static member sends no LeaveGroup
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        view = await describe_group(raw, group)
        assert old_id in view.members and view.state == "Stable"

        restarted = static(old.name)
        started.append(restarted)
        await restarted.start(run=False)
        await wait_until(lambda: bool(restarted.assignment(topic)), 5, "the restarted member")
        assert loop.time() - stopped_at < session_ms / 1000, "restart took too long for the test"
        assert parts(restarted.assignment(topic), topic) == old_parts
        assert restarted.generation == generation
        assert restarted.member_id != old_id
        assert not restarted.is_leader  # it took the stored assignment, computed none
        assert [parts(a, topic) for a in restarted.tracker.assigned] == [old_parts]

        view = await wait_settled([*others, restarted], topic, 6, raw, group)
        assert old_id not in view.members
        assert {m.group_instance_id for m in view.members.values()} == {"sa", "sb", "sc"}
        assert others_ids < set(view.members)
        assert view.members[restarted.member_id].assignment == {topic: old_parts}

        # Absence of a rebalance can only be observed by waiting: past the old instance's
        # session timeout, with the others heartbeating every 200 ms all along.
        await asyncio.sleep(max(0.0, stopped_at + session_ms / 1000 + 0.5 - loop.time()))
        assert [w.tracker.calls for w in others] == calls
        assert all(w.generation == generation for w in [*others, restarted])
        after = await describe_group(raw, group)
        assert after == view
    finally:
        await stop_workers(started)


# --------------------------------------------------------------------------------------------
# Topic changes a subscription sees


async def test_new_partitions_of_a_subscribed_topic_are_assigned(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    topic, group = "grow-events", "grow"
    await create_topic(admin, topic, 2)
    workers = await start_workers([Worker(f"g{i}", bootstrap, group, (topic,)) for i in range(2)])
    try:
        await wait_settled(workers, topic, 2, raw, group)
        generation = workers[0].generation
        await admin.create_partitions({topic: NewPartitions(total_count=5)})
        await wait_settled(workers, topic, 5, raw, group, timeout=10)
        assert all(w.generation > generation for w in workers)

        # The new partitions are really consumed: a record sent to each arrives.
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, metadata_max_age_ms=META_AGE_MS)
        await producer.start()
        try:
            for p in (2, 3, 4):
                await producer.send_and_wait(topic, b"new-%d" % p, partition=p)
        finally:
            await producer.stop()
        await wait_until(
            lambda: {b.partition for w in workers for b in w.ledger.batches} >= {2, 3, 4},
            10,
            "records of the new partitions consumed",
        )
    finally:
        await stop_workers(workers)


async def test_pattern_subscription_picks_up_a_new_matching_topic(
    bootstrap: str, admin: AIOKafkaAdminClient, raw: RawConnection
) -> None:
    group = "pattern"
    await create_topic(admin, "pat-a", 2)
    await create_topic(admin, "other-a", 2)
    workers = await start_workers(
        [Worker(f"p{i}", bootstrap, group, pattern=r"^pat-.*") for i in range(2)], run=False
    )
    try:
        await wait_settled(workers, "pat-a", 2, raw, group)
        assert all(not w.assignment("other-a") for w in workers)
        generation = workers[0].generation
        await create_topic(admin, "pat-b", 3)
        await create_topic(admin, "other-b", 3)
        await wait_settled(workers, "pat-b", 3, raw, group, timeout=10)
        assert partitions_settled(workers, "pat-a", 2)
        assert all(w.generation > generation for w in workers)
        view = await describe_group(raw, group)
        assert view.partitions("pat-a") == [0, 1] and view.partitions("pat-b") == [0, 1, 2]
        assert view.partitions("other-a") == [] and view.partitions("other-b") == []
    finally:
        await stop_workers(workers)
