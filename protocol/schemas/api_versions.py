"""ApiVersions (api_key 18).

* v3 (KIP-511) is missing from aiokafka.  It is the first *flexible* version:
  the request uses request header v2 and a compact body with tagged fields.
  The **response header stays v0** (no tagged fields) for every ApiVersions
  version, so a client that does not know the broker's versions can still read
  the error code.  When the broker rejects the requested version it must answer
  with a v0 body (``error_code=UNSUPPORTED_VERSION``).
* ``aiokafka.protocol.admin.ApiVersionRequest_v2`` has
  ``RESPONSE_TYPE = ApiVersionResponse_v1`` (same wire shape as v2, but the
  class reports ``API_VERSION == 1``); we override it with a request class
  whose ``RESPONSE_TYPE`` is ``ApiVersionResponse_v2``.

Response v3 tagged fields (all optional, raw bytes in ``tags``):
0 ``SupportedFeatures``, 1 ``FinalizedFeaturesEpoch``, 2 ``FinalizedFeatures``,
3 ``ZkMigrationReady``.  A broker without feature flags sends ``tags={}``.
"""

from __future__ import annotations

from io import BytesIO

from aiokafka.protocol.admin import ApiVersionRequest_v0, ApiVersionResponse_v2
from aiokafka.protocol.api import RequestStruct, Response, ResponseHeader_v0
from aiokafka.protocol.types import CompactArray, CompactString, Int16, Int32, Schema

from .types import TaggedFields


class ApiVersionsRequest_v2(RequestStruct):
    """Overrides aiokafka's ApiVersionRequest_v2 (wrong RESPONSE_TYPE)."""

    API_KEY = 18
    API_VERSION = 2
    RESPONSE_TYPE = ApiVersionResponse_v2
    SCHEMA = ApiVersionRequest_v0.SCHEMA


class ApiVersionsResponse_v3(Response):
    API_KEY = 18
    API_VERSION = 3
    SCHEMA = Schema(
        ("error_code", Int16),
        (
            "api_versions",
            CompactArray(
                ("api_key", Int16),
                ("min_version", Int16),
                ("max_version", Int16),
                ("tags", TaggedFields),
            ),
        ),
        ("throttle_time_ms", Int32),
        ("tags", TaggedFields),
    )


class ApiVersionsRequest_v3(RequestStruct):
    API_KEY = 18
    API_VERSION = 3
    FLEXIBLE_VERSION = True
    RESPONSE_TYPE = ApiVersionsResponse_v3
    SCHEMA = Schema(
        ("client_software_name", CompactString("utf-8")),
        ("client_software_version", CompactString("utf-8")),
        ("tags", TaggedFields),
    )

    def parse_response_header(self, read_buffer: BytesIO | bytes) -> ResponseHeader_v0:
        # FLEXIBLE_VERSION selects request header v2, but ApiVersions responses
        # always use response header v0 (KIP-511).
        return ResponseHeader_v0.decode(read_buffer)


MESSAGES: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {
    (18, 2): (ApiVersionsRequest_v2, ApiVersionResponse_v2),
    (18, 3): (ApiVersionsRequest_v3, ApiVersionsResponse_v3),
}
