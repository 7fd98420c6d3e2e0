"""The Java reference client (kafka-clients 4.3) against the in-process broker.

``tests/java/KgroupdCheck.java`` creates a topic with the Admin client, produces with every
compression codec through idempotent acks=all producers, and reads everything back with the
calls Spark's Kafka source makes (describeTopics, listOffsets, assign, seek, poll), checking
every record. It prints one ``KGROUPD_CHECK <json>`` summary line, asserted on here. The jars
and the compiled classes are cached in ``.cache/java`` (see ``tests.support.java``).
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import time
from dataclasses import dataclass
from typing import Any

import pytest

from kgroupd.broker.net.server import KafkaServer
from tests.conftest import require
from tests.support.java import JavaClient, java_available, prepare_java_client

pytestmark = pytest.mark.java

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS_PER_CODEC = 2000
PARTITIONS = 3
JAVA_TIMEOUT_S = 45.0  # the program gives up on its own after 10 s per call
SUMMARY_PREFIX = "KGROUPD_CHECK "
# Our SLF4J provider's line format: "HH:MM:SS.nnn LEVEL [thread] Logger: message".
CLIENT_COMPLAINT = re.compile(r"^\S+ (WARN|ERROR) ", re.MULTILINE)


@pytest.fixture(scope="module")
def java_client() -> JavaClient:
    require(java_available(), "java and javac (JDK 17) are not on PATH; the Java client needs them")
    return prepare_java_client()


@dataclass
class JavaRun:
    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    summary: dict[str, Any] | None

    def report(self, limit: int = 20_000) -> str:
        args = " ".join(self.command[self.command.index("KgroupdCheck") :])
        return (
            f"\n$ java ... {args}\nexit {self.returncode} after {self.seconds:.1f} s"
            f"\n--- stdout ---\n{self.stdout[-limit:]}\n--- stderr ---\n{self.stderr[-limit:]}"
        )


async def run_java(client: JavaClient, *args: str, log_level: str = "WARN") -> JavaRun:
    """Run KgroupdCheck without blocking the event loop the in-process broker runs on."""
    command = client.command("KgroupdCheck", *args, properties={"kgroupd.log.level": log_level})
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), JAVA_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        err += f"\n[killed by the test after {JAVA_TIMEOUT_S} s]".encode()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    summary = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(SUMMARY_PREFIX):
            summary = json.loads(line[len(SUMMARY_PREFIX) :])
            break
    return JavaRun(command, proc.returncode, stdout, stderr, time.monotonic() - started, summary)


def stored_batches(server: KafkaServer, topic: str) -> list[tuple[int, int, int, int]]:
    """(codec, producer id, base sequence, size) of every batch the broker stored."""
    stored = server.broker.topics.get(topic)
    assert stored is not None, f"the broker has no topic {topic!r}"
    found = []
    for log in stored.partitions:
        for batch in log.batches:
            # Record batch v2: attributes at byte 21, producer id at 43, base sequence at 53.
            (attributes,) = struct.unpack_from(">h", batch.data, 21)
            producer_id, _epoch, base_sequence = struct.unpack_from(">qhi", batch.data, 43)
            found.append((attributes & 0x07, producer_id, base_sequence, len(batch.data)))
    return found


async def test_java_admin_produce_and_spark_style_consume(
    server: KafkaServer, bootstrap: str, java_client: JavaClient
) -> None:
    topic = "java-check"
    run = await run_java(
        java_client, bootstrap, "roundtrip", topic, str(RECORDS_PER_CODEC), ",".join(CODECS)
    )
    assert run.summary is not None, f"no summary line from the Java check{run.report()}"
    summary = run.summary
    assert run.returncode == 0 and summary["ok"], (
        f"Java check failed at step {summary.get('step')}: {summary.get('exception')}"
        f" {summary.get('errors')}{run.report()}"
    )
    complaints = CLIENT_COMPLAINT.findall(run.stderr)
    assert not complaints, f"the Java client logged warnings or errors{run.report()}"

    total = RECORDS_PER_CODEC * len(CODECS)
    node = server.broker.node_id
    # Admin: cluster, topic creation and description, configs.
    assert summary["cluster_id"] == server.broker.cluster_id
    assert summary["nodes"] == [f"{node}@127.0.0.1:{server.port}"]
    assert summary["controller"] == node
    assert summary["create_existing"] == "TopicExistsException"
    assert summary["partitions"] == PARTITIONS
    assert summary["leaders"] == [node] * PARTITIONS
    assert summary["replicas_isr"] == ["1/1"] * PARTITIONS
    assert summary["topic_configs"]["retention.ms"] == "86400000 (DYNAMIC_TOPIC_CONFIG)"
    assert summary["topic_configs"]["cleanup.policy"] == "delete (DYNAMIC_TOPIC_CONFIG)"
    assert summary["topic_configs"]["max.message.bytes"] == "1048588 (DEFAULT_CONFIG)"
    assert summary["broker_config_count"] > 0
    # Offsets before and after producing, from the Admin client and the consumer.
    assert summary["empty_earliest"] == summary["empty_latest"] == [0] * PARTITIONS
    assert summary["produced"] == dict.fromkeys(CODECS, RECORDS_PER_CODEC)
    per_partition = [len(range(p, total, PARTITIONS)) for p in range(PARTITIONS)]
    assert summary["earliest"] == summary["consumer_beginning"] == [0] * PARTITIONS
    assert summary["latest"] == summary["latest_read_committed"] == per_partition
    assert summary["consumer_end"] == summary["consumer_positions"] == per_partition
    assert summary["by_timestamp"] == [n // 2 for n in per_partition]
    assert summary["consumed"] == total
    assert summary["seek_middle"] == [n // 2 + 1 for n in per_partition]

    # What the broker stored: the topic as created, every codec, idempotent batches only.
    stored = server.broker.topics.get(topic)
    assert stored is not None
    assert [log.high_watermark for log in stored.partitions] == per_partition
    assert stored.configs == {"retention.ms": "86400000", "cleanup.policy": "delete"}
    batches = stored_batches(server, topic)
    assert {codec for codec, *_ in batches} == set(CODEC_IDS.values())
    assert all(pid >= 0 and seq >= 0 for _, pid, seq, _ in batches), "a non-idempotent batch"
    assert len({pid for _, pid, *_ in batches}) == len(CODECS), "one producer id per producer"
    # The consumer's per-partition fetch limit was below most batch sizes (at-least-one-batch).
    sizes = [size for *_, size in batches]
    assert sum(size > summary["max_partition_fetch_bytes"] for size in sizes) > len(sizes) // 2
