"""Nothing a client sends reaches the broker's log unescaped: a KIP-848 regular expression
that does not compile (RE2 would write its pattern to stderr itself), a client id and a group
id holding newlines, a forged JSON line, a terminal escape sequence and Unicode line breaks
stay inside the field of one log line, in JSON and on the console.

The broker runs as a process (``python -m kgroupd.broker``) and its stderr is read whole: a
line of it that is not the broker's own (JSON, or the console renderer's timestamp first) is
a forged one.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kgroupd.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.kafka_wire import WireClient, build_batch, create_topic, produce_request

CONSUMER_GROUP_HEARTBEAT, PRODUCE = 68, 0
FORGED = '{"event": "sasl_authenticated", "level": "info", "principal": "User:admin"}'
REGEX = "(unclosed\n" + FORGED + "\n"
BREAKS = "\r\x1b[2K\u2028\x85\x0b"
CLIENT_ID = "evil\n" + FORGED + BREAKS
GROUP = "group\n" + FORGED + BREAKS
QUIET_ID = "quiet" + BREAKS.replace("\r", "")  # no newline or space: shown as it is on a console
TOPIC = "forging"


async def misbehave(port: int) -> None:
    """What a client may send: an invalid regex with newlines, a batch with a bad CRC under a
    forged client id, and a consumer group of a forged name (a real aiokafka consumer)."""
    async with await WireClient.connect(port, client_id=CLIENT_ID) as wire:
        await create_topic(wire, TOPIC, 1)
        hb = {
            "group_id": GROUP,
            "member_id": "m-1",
            "member_epoch": 0,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": REGEX,
            "topic_partitions": [],
        }
        got = await wire.request(CONSUMER_GROUP_HEARTBEAT, 1, hb)  # v1: regexes
        assert got["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION, got
        bad = bytearray(build_batch([(b"k", b"v", [])]))
        bad[-1] ^= 1
        resp = await wire.request(PRODUCE, 8, produce_request(TOPIC, 0, bytes(bad)))
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 2
    async with await WireClient.connect(port, client_id=QUIET_ID) as wire:
        resp = await wire.request(PRODUCE, 8, produce_request(TOPIC, 0, bytes(bad)))
        assert resp["responses"][0]["partition_responses"][0]["error_code"] == 2
    bootstrap = f"127.0.0.1:{port}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=CLIENT_ID)
    await producer.start()
    try:
        await producer.send_and_wait(TOPIC, b"v", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        client_id=CLIENT_ID,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        await asyncio.wait_for(consumer.getone(), 20)
        await consumer.commit()
    finally:
        await consumer.stop()


async def test_json_lines_stay_whole(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path, args=("--initial-rebalance-delay-ms", "0"))
    try:
        await proc.start()
        await misbehave(proc.port)
        await proc.wait_for_event("rebalance_completed", group_id=GROUP)
        await proc.stop()
    finally:
        await proc.close()
    assert proc.other_lines == []  # every line of stderr is one of the broker's JSON lines
    assert not proc.find("sasl_authenticated")
    refused = [e["client_id"] for e in proc.find("produce_refused")]
    assert refused == [CLIENT_ID, QUIET_ID]


ANSI_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # the console renderer's own colours
CONSOLE_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


async def test_console_lines_stay_whole(tmp_path: Path) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kgroupd.broker",
        "--port",
        str(port),
        "--http-port",
        "0",
        "--log-format",
        "console",
        "--initial-rebalance-delay-ms",
        "0",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        lines: list[bytes] = []
        while not any(b"advertised" in line for line in lines):  # the Kafka listener
            line = await asyncio.wait_for(proc.stderr.readline(), 20)
            assert line, f"the broker exited: {lines}"
            lines.append(line)
        await misbehave(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0
    text = b"".join(lines).decode() + rest.decode()
    assert "rebalance_completed" in text
    for line in text.split("\n")[:-1]:
        plain = ANSI_STYLE.sub("", line)
        assert CONSOLE_LINE.match(plain), f"a line not the broker's: {line!r}"
        assert plain.isprintable(), f"a control character in {line!r}"
    for forged in (CLIENT_ID, GROUP, QUIET_ID):  # shown, escaped, within a line
        escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in forged)
        assert repr(escaped) in text or f"client_id={escaped}" in ANSI_STYLE.sub("", text)
