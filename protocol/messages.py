"""The message registry: (api_key, version) -> the codecs of its request and its response.

Every served API is defined in ``protocol/schemas`` with our own field trees
(``kgroupd.protocol.codec``); ``kgroupd.protocol.schemas.SERVED`` is the one table of served
version ranges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgroupd.protocol.codec import Frame, VersionCodec
from kgroupd.protocol.schemas import DEFINITIONS, SERVED

API_VERSIONS_KEY = 18


@dataclass(frozen=True, slots=True)
class MessageSpec:
    api_key: int
    version: int
    request: VersionCodec
    response: VersionCodec
    # Flexible versions use request header v2 and response header v1 (fields, not
    # properties: every request reads them).
    flexible: bool = field(init=False)
    # ApiVersions always answers with response header v0, so a client that does not know
    # our versions yet can still read the answer.
    response_header_v1: bool = field(init=False)

    def __post_init__(self) -> None:
        flexible = self.request.flexible
        object.__setattr__(self, "flexible", flexible)
        object.__setattr__(
            self, "response_header_v1", flexible and self.api_key != API_VERSIONS_KEY
        )

    def decode_request(self, frame: Frame, offset: int) -> dict[str, Any]:
        """Bytes after the body are ignored, as Kafka ignores them."""
        return self.request.decode(frame, offset, exact=False)

    def encode_response(self, data: Mapping[str, Any]) -> bytes:
        return self.response.encode(data)

    def encode_error(self, code: int) -> bytes:
        return self.response.encode_error(code)

    # the client side, for tests and benchmarks
    def encode_request(self, data: Mapping[str, Any]) -> bytes:
        return self.request.encode(data)

    def decode_response(self, data: Frame, offset: int = 0) -> dict[str, Any]:
        return self.response.decode(data, offset)


def _collect() -> dict[tuple[int, int], MessageSpec]:
    found: dict[tuple[int, int], MessageSpec] = {}
    for api_key, (lo, hi) in SERVED.items():
        req, resp = DEFINITIONS[api_key]
        for version in range(lo, hi + 1):
            found[(api_key, version)] = MessageSpec(
                api_key, version, req.codec(version), resp.codec(version)
            )
    return found


MESSAGES: dict[tuple[int, int], MessageSpec] = _collect()


def lookup(api_key: int, version: int) -> MessageSpec | None:
    return MESSAGES.get((api_key, version))


def served_range(api_key: int) -> tuple[int, int] | None:
    """The range of versions ``SERVED`` lists for ``api_key``."""
    return SERVED.get(api_key)


__all__ = ["MESSAGES", "MessageSpec", "lookup", "served_range"]
