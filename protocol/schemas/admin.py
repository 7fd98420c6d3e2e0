"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
DescribeConfigs (32)."""

from __future__ import annotations

from protocol.codec import Message

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {}
