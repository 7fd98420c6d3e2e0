"""A share fetch of large records takes up to its record limit within its max bytes, however
many reads of the log that needs (kgroupd reads max records x 1 KiB, 1 MiB at least, at a
time), as Kafka's share fetch reads up to the fetch's max bytes."""

from __future__ import annotations

from kgroupd.broker.net.server import KafkaServer
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request
from tests.support.share_wire import acquired, heartbeat, set_group_config

TOPIC, GROUP = "large", "large-g"


async def test_large_records_fill_the_fetch(server: KafkaServer) -> None:
    member = "m" * 22
    async with await WireClient.connect(server.port) as wire:
        await create_topic(wire, TOPIC, 1, {})
        for i in range(60):  # 60 batches of one 40 KB record: 2.4 MB
            batch = build_batch([(None, bytes([i]) * 40_000, [])])
            resp = await wire.request(0, 8, produce_request(TOPIC, 0, batch))
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        await set_group_config(wire, GROUP, "share.auto.offset.reset", "earliest")
        joined = await heartbeat(wire, GROUP, member, 0, TOPIC)
        topic_id = joined["assignment"]["topic_partitions"][0]["topic_id"]
        fetch = {
            "group_id": GROUP,
            "member_id": member,
            "share_session_epoch": 0,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 8 << 20,
            "max_records": 100,
            "batch_size": 100,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": []}],
                }
            ],
            "forgotten_topics_data": [],
        }
        resp = await wire.request(78, 1, fetch)
        assert acquired(resp) == [(0, 59, 1)]
        records = resp["responses"][0]["partitions"][0]["records"]
        assert len(records) > 60 * 40_000
