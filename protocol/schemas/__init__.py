"""Wire schemas the broker serves that aiokafka 0.14 lacks (or gets wrong).

Public API:

``ALL_SERVED``
    ``api_key -> (min_version, max_version)`` the broker serves.  Single
    source of truth for the ApiVersions response and the request registry.
``EXTRA_MESSAGES``
    ``(api_key, version) -> (request struct class, response struct class)``
    for every served version where aiokafka has no class, or where
    aiokafka's class is wrong for a server.  These take precedence over
    aiokafka.
``AIOKAFKA_MESSAGES``
    The aiokafka classes used for the remaining served versions.
``SERVED_MESSAGES``
    ``{**AIOKAFKA_MESSAGES, **EXTRA_MESSAGES}``: one entry for every served
    ``(api_key, version)``.
``request_header_version`` / ``response_header_version``
    Header versions per (api_key, version) (only ApiVersions v3 is flexible,
    and its *response* header is still v0).

Request bodies decode with ``RequestCls.decode(BytesIO)``; responses encode
with ``ResponseCls(**fields).encode()``.  Nested arrays of structs are lists of
tuples in schema order (aiokafka convention).
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response

from . import admin, api_versions, group, metadata, offsets, producer
from .served import AIOKAFKA_MESSAGES
from .types import TaggedFields

ALL_SERVED: dict[int, tuple[int, int]] = {
    18: (0, 3),  # ApiVersions
    3: (0, 8),  # Metadata
    19: (0, 4),  # CreateTopics
    20: (0, 3),  # DeleteTopics
    37: (0, 1),  # CreatePartitions
    0: (0, 8),  # Produce (v0-v2 advertised but refused, as Kafka 4 does)
    22: (0, 1),  # InitProducerId
    1: (4, 11),  # Fetch
    2: (0, 5),  # ListOffsets
    32: (0, 3),  # DescribeConfigs
    10: (0, 2),  # FindCoordinator
    11: (0, 5),  # JoinGroup
    14: (0, 3),  # SyncGroup
    12: (0, 3),  # Heartbeat
    13: (0, 3),  # LeaveGroup
    8: (0, 7),  # OffsetCommit
    9: (0, 5),  # OffsetFetch
    15: (0, 4),  # DescribeGroups
    16: (0, 2),  # ListGroups
    42: (0, 1),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
}

EXTRA_MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    **api_versions.MESSAGES,
    **metadata.MESSAGES,
    **admin.MESSAGES,
    **producer.MESSAGES,
    **offsets.MESSAGES,
    **group.MESSAGES,
}

SERVED_MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    **AIOKAFKA_MESSAGES,
    **EXTRA_MESSAGES,
}


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version: 2 for flexible request bodies, else 1."""
    request_cls, _ = SERVED_MESSAGES[(api_key, api_version)]
    return 2 if request_cls.FLEXIBLE_VERSION else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version: 1 for flexible bodies, else 0.

    ApiVersions (18) always answers with response header v0 (KIP-511).
    """
    request_cls, _ = SERVED_MESSAGES[(api_key, api_version)]
    if api_key == 18:
        return 0
    return 1 if request_cls.FLEXIBLE_VERSION else 0


__all__ = [
    "AIOKAFKA_MESSAGES",
    "ALL_SERVED",
    "EXTRA_MESSAGES",
    "SERVED_MESSAGES",
    "TaggedFields",
    "request_header_version",
    "response_header_version",
]
