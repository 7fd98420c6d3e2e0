"""ApiVersions over the wire lists exactly the served table, and clients see a Kafka 4 broker."""

from __future__ import annotations

import asyncio
import warnings

from kgroupd.broker.net.server import KafkaServer
from kgroupd.protocol.schemas import SERVED
from tests.support.kafka_wire import WireClient


async def test_api_versions_v4_lists_the_served_table_and_the_features(server: KafkaServer) -> None:
    async with await WireClient.connect(server.port) as wire:
        resp = await wire.request(
            18, 4, {"client_software_name": "t", "client_software_version": "1"}
        )
    assert resp["error_code"] == 0
    listed = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    assert listed == SERVED
    finalized = {f["name"]: f["max_version_level"] for f in resp["finalized_features"]}
    assert finalized == {"group.version": 1, "transaction.version": 2, "share.version": 1}


async def test_kafka_python_sees_a_kafka_4_broker(server: KafkaServer) -> None:
    def infer() -> tuple[int, ...]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka import KafkaAdminClient

            admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}")
            try:
                return tuple(admin._client.check_version())
            finally:
                admin.close()

    # kafka-python infers the broker's version from ApiVersions; it was 2.4 before kgroupd
    # served flexible versions.
    assert await asyncio.to_thread(infer) >= (4, 0)


async def test_every_version_answers_the_same_table_again(server: KafkaServer) -> None:
    """The answer body is encoded once per version and reused: each version still lists the
    served table (v1+ with throttle time 0, v3+ the features), on a second request too."""
    v3 = {"client_software_name": "t", "client_software_version": "1"}
    async with await WireClient.connect(server.port) as wire:
        for version in range(5):
            for _ in range(2):
                resp = await wire.request(18, version, v3 if version >= 3 else {})
                assert resp["error_code"] == 0
                listed = {
                    k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]
                }
                assert listed == SERVED
                if version:
                    assert resp["throttle_time_ms"] == 0
                if version >= 3:
                    assert resp["finalized_features_epoch"] == 1
                    assert len(resp["finalized_features"]) == 3
