"""topics.json, the topic table under --data-dir: a request changing many topics writes it
once (as the request ends, before its answer), with every change, and a kill -9 right after
the answers brings back exactly the topics answered (their partitions, ids and configs); the
directories of topics deleted go, those of the topics kept stay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.broker_process import broker_process
from tests.support.kafka_wire import WireClient, build_batch, produce_request

TOPICS = [f"t-{i}" for i in range(30)]
METADATA_ALL = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def create_all() -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "num_partitions": 2,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "segment.ms", "value": "3600000"}] if name == "t-20" else [],
            }
            for name in TOPICS
        ],
        "timeout_ms": 10_000,
        "validate_only": False,
    }


async def table(wire: WireClient) -> dict[str, tuple[int, str]]:
    """Every topic the broker serves: name -> (partitions, topic id)."""
    resp = await wire.request(3, 12, METADATA_ALL)
    return {
        t["name"]: (len(t["partitions"]), str(t["topic_id"]))
        for t in resp["topics"]
        if not t["name"].startswith("__")
    }


def on_disk(data: Path) -> dict[str, tuple[int, str, dict[str, str]]]:
    with open(data / "topics.json") as f:
        found = json.load(f)
    assert found["version"] == 1
    return {n: (s["partitions"], s["topic_id"], s["configs"]) for n, s in found["topics"].items()}


async def test_a_request_of_many_topics_is_on_disk_when_answered(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker_process(data) as broker:
        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            resp = await wire.request(19, 7, create_all())
            assert [t["error_code"] for t in resp["topics"]] == [0] * len(TOPICS)
            ids = {t["name"]: str(t["topic_id"]) for t in resp["topics"]}
            for name in ("t-5", "t-25"):  # data: a directory each
                batch = build_batch([(b"k", b"v", [])])
                resp = await wire.request(0, 9, produce_request(name, 1, batch))
                assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
            gone = TOPICS[:10]
            resp = await wire.request(
                20,
                6,
                {"topics": [{"name": n, "topic_id": None} for n in gone], "timeout_ms": 10_000},
            )
            assert [r["error_code"] for r in resp["responses"]] == [0] * len(gone)
            grown = TOPICS[10:15]
            resp = await wire.request(
                37,
                3,
                {
                    "topics": [{"name": n, "count": 4, "assignments": None} for n in grown],
                    "timeout_ms": 10_000,
                    "validate_only": False,
                },
            )
            assert [r["error_code"] for r in resp["results"]] == [0] * len(grown)
            altered = TOPICS[15:20]
            resp = await wire.request(
                44,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": n,
                            "configs": [
                                {"name": "retention.ms", "value": "1234", "config_operation": 0}
                            ],
                        }
                        for n in altered
                    ],
                    "validate_only": False,
                },
            )
            assert [r["error_code"] for r in resp["responses"]] == [0] * len(altered)
        await broker.kill()

        def count(name: str) -> int:
            return 4 if name in grown else 2

        def configs(name: str) -> dict[str, str]:
            if name in altered:
                return {"retention.ms": "1234"}
            return {"segment.ms": "3600000"} if name == "t-20" else {}

        kept = [n for n in TOPICS if n not in gone]
        want = {n: (count(n), ids[n], configs(n)) for n in kept}
        assert on_disk(data) == want  # what the kill left
        assert not (data / "topics" / "t-5-1").exists()
        assert (data / "topics" / "t-25-1").exists()

        await broker.start()
        async with await WireClient.connect(broker.port) as wire:
            assert await table(wire) == {n: want[n][:2] for n in kept}
            # the entries read back are written again with the next change
            resp = await wire.request(
                20, 6, {"topics": [{"name": "t-29", "topic_id": None}], "timeout_ms": 10_000}
            )
            assert resp["responses"][0]["error_code"] == 0
        del want["t-29"]
        assert on_disk(data) == want
        await broker.stop()
