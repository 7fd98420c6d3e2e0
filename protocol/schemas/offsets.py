"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from __future__ import annotations

from protocol.codec import Message

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {}
