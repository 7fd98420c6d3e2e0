"""Classic group membership and administration: FindCoordinator (10), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16),
DeleteGroups (42)."""

from __future__ import annotations

from protocol.codec import Message

# api_key -> (request, response)
DEFINITIONS: dict[int, tuple[Message, Message]] = {}
