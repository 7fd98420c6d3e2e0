"""ApiVersions v0-v3.

v1 adds throttle_time_ms; v3 is flexible (request header v2, client software name and
version), though its response header stays v0. An unsupported version is answered with a
v0 body carrying UNSUPPORTED_VERSION and our ranges (see the connection), never a close.
"""

from __future__ import annotations

from broker.handlers.registry import Fields, RequestContext, handler, supported_versions
from protocol.errors import ErrorCode


def api_versions_body(error: ErrorCode) -> Fields:
    keys = [
        {"api_key": k, "min_version": lo, "max_version": hi, "tags": {}}
        for k, lo, hi in supported_versions()
    ]
    return {
        "error_code": int(error),
        "api_versions": keys,
        "api_keys": keys,
        "throttle_time_ms": 0,
        "tags": {},
    }


@handler(18, 0, 3)
def handle_api_versions(ctx: RequestContext, req: Fields) -> Fields:
    return api_versions_body(ErrorCode.NONE)
