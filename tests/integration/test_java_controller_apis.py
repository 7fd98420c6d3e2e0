"""The Java Admin 4.3 (``tests/java/KgroupdControllerCheck.java``) against the controller-side
APIs kgroupd answers as a single-node Kafka 4.3 (issue 29): describeMetadataQuorum (a quorum of
one voter), describeFeatures and updateFeatures (validated, refused, a no-op), listConfigResources,
unregisterBroker, addRaftVoter and removeRaftVoter (a static quorum), and the delegation
token calls, which Kafka refuses over PLAINTEXT
(UnsupportedByAuthenticationException) and, tokens not being enabled, over SASL
(DelegationTokenDisabledException)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kgroupd.broker.net.server import KafkaServer
from kgroupd.broker.testing import running_server
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client
from tests.support.kafka_wire import WireClient, create_topic

pytestmark = pytest.mark.java


def port_of(server: KafkaServer, name: str) -> int:
    return next(p for listener, p, _ in server.bound if listener.name == name)


async def test_java_admin_calls_the_controller_apis(tmp_path: Path) -> None:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    java: JavaClient = await asyncio.to_thread(prepare_java_client)
    users = tmp_path / "users.txt"
    users.write_text("alice:alice-secret\n")
    async with running_server(
        log_level="warning",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        sasl_users=str(users),
    ) as server:
        plain, sasl = port_of(server, "PLAINTEXT"), port_of(server, "SASL_PLAINTEXT")
        async with await WireClient.connect(plain) as wire:
            await create_topic(wire, "java-controller", 1)
        command = java.command("KgroupdControllerCheck", f"127.0.0.1:{plain}", f"127.0.0.1:{sasl}")
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    where = f"\n--- stdout ---\n{out.decode()[-3000:]}\n--- stderr ---\n{err.decode()[-6000:]}"
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("KGROUPD_CONTROLLER ")]
    assert proc.returncode == 0 and lines, where
    s = json.loads(lines[-1].split(" ", 1)[1])
    node = server.broker.node_id
    assert (s["leader"], s["leader_epoch"], s["voters"], s["voter"]) == (node, 1, 1, node), where
    assert (s["observers"], s["quorum_nodes"], s["voter_fetch"]) == (0, f"[{node}]", True), where
    assert s["high_watermark"] == 0, where
    tv = server.broker.config.transaction_version
    assert s["finalized"] == f"{{group.version=1, share.version=1, transaction.version={tv}}}", (
        where
    )
    assert (s["validated"], s["same"]) == ("ok", "ok"), where
    assert s["too_new"] == "InvalidUpdateVersionException", where
    assert f"only supports versions 0-{tv}" in s["too_new_message"], where
    assert s["config_resources"] == f"[BROKER:{node}, TOPIC:java-controller]", where
    assert s["topic_resources"] == "[TOPIC:java-controller]", where
    assert s["unregister_self"] == "ok", where
    assert s["unregister_other"] == "BrokerIdNotRegisteredException", where
    assert (s["add_voter"], s["remove_voter"]) == ("UnsupportedVersionException",) * 2, where
    assert "kraft.version feature is 0" in s["add_voter_message"], where
    for call in ("create", "renew", "expire", "describe"):
        assert s[f"plain_{call}"] == "UnsupportedByAuthenticationException", where
        assert s[f"sasl_{call}"] == "DelegationTokenDisabledException", where
