"""confluent-kafka's ShareConsumer against a test broker: group configs, producing, and
polling until a condition holds (a deadline bounds the wait; nothing asserts on time)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Message, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """IncrementalAlterConfigs SET of group configs (``share_auto_offset_reset=...``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin.incremental_alter_configs([res])[res].result(10)


def produce(bootstrap: str, topic: str, values: list[bytes], timestamp: int | None = None) -> None:
    """One batch per record (records of one batch are acquired together)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        if timestamp is None:
            p.produce(topic, value=v)
        else:
            p.produce(topic, value=v, timestamp=timestamp)
        p.flush(10)
    assert p.flush(10) == 0


def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    config = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    c = ShareConsumer(config)
    c.subscribe([topic])
    return c


def poll(c: ShareConsumer, timeout: float = 1.0) -> list[Message]:
    out = []
    for m in c.poll(timeout):
        assert m.error() is None, m.error()
        out.append(m)
    return out


def poll_until(
    c: ShareConsumer,
    done: Callable[[list[Message]], bool],
    deadline_s: float = 30,
    each: Callable[[Message], None] | None = None,
) -> list[Message]:
    """Poll until ``done(everything received)`` (or the deadline); ``each`` sees every message
    (to acknowledge it)."""
    got: list[Message] = []
    deadline = time.monotonic() + deadline_s
    while not done(got) and time.monotonic() < deadline:
        for m in poll(c, 0.5):
            if each is not None:
                each(m)
            got.append(m)
    return got
