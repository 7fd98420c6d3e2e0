"""ApiVersions v0-v4.

v1 adds throttle_time_ms; v3 is flexible (request header v2, client software name and
version, feature tags), though its response header stays v0; v4 is v3 with the promise that
an unsupported version is answered at v0. An unsupported version is answered with a
v0 body carrying UNSUPPORTED_VERSION and our ranges (see the connection), never a close.
"""

from __future__ import annotations

from broker.handlers.registry import Fields, RequestContext, handler, supported_versions
from protocol.errors import ErrorCode


def api_versions_body(error: ErrorCode) -> Fields:
    keys = [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in supported_versions()
    ]
    return {"error_code": int(error), "api_keys": keys}


@handler(18)
def handle_api_versions(ctx: RequestContext, req: Fields) -> Fields:
    return api_versions_body(ErrorCode.NONE)
