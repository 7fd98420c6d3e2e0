"""The message registry: (api_key, version) -> the codecs of its request and its response.

Every served API is defined in ``protocol/schemas`` with our own field trees
(``kgroupd.protocol.codec``); ``kgroupd.protocol.schemas.SERVED`` is the one table of served
version ranges.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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


# (api_key, version) -> its codecs, built when first looked up: a broker builds the few
# dozen its clients use, not the four hundred it serves.
_BUILT: dict[tuple[int, int], MessageSpec] = {}


def lookup(api_key: int, version: int) -> MessageSpec | None:
    """The codecs of a served version; None for a version or API not in ``SERVED``."""
    spec = _BUILT.get((api_key, version))
    if spec is None:
        served = SERVED.get(api_key)
        if served is None or not served[0] <= version <= served[1]:
            return None
        req, resp = DEFINITIONS[api_key]
        spec = MessageSpec(api_key, version, req.codec(version), resp.codec(version))
        _BUILT[(api_key, version)] = spec
    return spec


class _Messages(Mapping[tuple[int, int], MessageSpec]):
    """Every served (api_key, version) and its codecs, built on first use."""

    def __getitem__(self, key: tuple[int, int]) -> MessageSpec:
        spec = lookup(*key)
        if spec is None:
            raise KeyError(key)
        return spec

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for api_key, (lo, hi) in SERVED.items():
            for version in range(lo, hi + 1):
                yield api_key, version

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in SERVED.values())


MESSAGES: Mapping[tuple[int, int], MessageSpec] = _Messages()


def served_range(api_key: int) -> tuple[int, int] | None:
    """The range of versions ``SERVED`` lists for ``api_key``."""
    return SERVED.get(api_key)


__all__ = ["MESSAGES", "MessageSpec", "lookup", "served_range"]
