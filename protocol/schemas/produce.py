"""Produce (0) and InitProducerId (22)."""

from __future__ import annotations

from protocol.codec import Message

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {}
