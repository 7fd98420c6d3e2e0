"""Hand-written codecs for the hottest requests, checked against the general codec in tests.

The general codec walks a field tree; these read and write the fields of the requests clients
send most (Heartbeat, OffsetCommit) and the Fetch response directly, one module per API. Any
malformation raises ``ValueError``, like the general codec's errors.
"""

from kgroupd.protocol.fast.commit import (
    CommitPartition,
    decode_offset_commit,
    encode_offset_commit_response,
)
from kgroupd.protocol.fast.common import Chunks, encode_error_only, read_int32, read_string
from kgroupd.protocol.fast.fetch import FetchPartition, encode_fetch_response
from kgroupd.protocol.fast.heartbeat import decode_heartbeat, encode_heartbeat_response

__all__ = [
    "Chunks",
    "CommitPartition",
    "FetchPartition",
    "decode_heartbeat",
    "decode_offset_commit",
    "encode_error_only",
    "encode_fetch_response",
    "encode_heartbeat_response",
    "encode_offset_commit_response",
    "read_int32",
    "read_string",
]
