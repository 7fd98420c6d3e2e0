"""The one piece of the consumer protocol the coordinator reads: a subscription's topics.

Like Kafka, only the v0 prefix is read (int16 version, then an array of topic strings); every
later version (v1-v3) starts with the same fields, so any version parses.
"""

from __future__ import annotations

import struct

__all__ = ["ConsumerProtocolError", "encode_subscription", "subscription_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerProtocolError(ValueError):
    pass


def subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version); raises on malformed bytes."""
    try:
        (version,) = struct.unpack_from(">h", metadata, 0)
        if version < 0:
            raise ConsumerProtocolError(f"negative consumer protocol version {version}")
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0:
            raise ConsumerProtocolError("null topic array")
        pos = 6
        topics: list[str] = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if n < 0 or pos + n > len(metadata):
                raise ConsumerProtocolError("bad topic string")
            topics.append(metadata[pos : pos + n].decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise ConsumerProtocolError(str(exc)) from exc


def encode_subscription(topics: list[str], version: int = 0, user_data: bytes = b"") -> bytes:
    """A minimal subscription encoder (v0 layout plus version); for tests and tools."""
    out = bytearray(struct.pack(">hi", version, len(topics)))
    for t in topics:
        raw = t.encode("utf-8")
        out += struct.pack(">h", len(raw)) + raw
    out += struct.pack(">i", len(user_data)) + user_data
    return bytes(out)
