"""ApiVersions v0-v4.

v1 adds throttle_time_ms; v3 is flexible (request header v2, client software name and
version, feature tags), though its response header stays v0; v4 is v3 with the promise that
an unsupported version is answered at v0. An unsupported version is answered with a
v0 body carrying UNSUPPORTED_VERSION and our ranges (see the connection), never a close.
"""

from __future__ import annotations

from kgroupd.broker.handlers.registry import (
    HOMES,
    Fields,
    RequestContext,
    handler,
    supported_versions,
)
from kgroupd.broker.quotas import REQUEST as REQUEST_QUOTA
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.messages import lookup

# Feature flags (KIP-584) Kafka 4.3 advertises, each with the API that makes it true here:
# name -> (api key that must be served, min supported, max supported = finalized level).
# group.version 1 means the KIP-848 consumer group protocol (ConsumerGroupHeartbeat);
# transaction.version 2 KIP-890 part 2 transactions (EndTxn v5): its finalized level is
# --transaction-version (1 or 2).
FEATURES: dict[str, tuple[int, int, int]] = {
    "group.version": (68, 0, 1),
    "transaction.version": (26, 0, 2),
    # share groups (KIP-932): level 1 is what `kafka-features.sh upgrade --feature
    # share.version=1` enables on a Kafka 4.x cluster
    "share.version": (76, 0, 1),
}
FINALIZED_FEATURES_EPOCH = 1


def features() -> list[tuple[str, int, int]]:
    """The features this kgroupd implements: (name, min, max)."""
    return [(name, lo, hi) for name, (api, lo, hi) in FEATURES.items() if api in HOMES]


def api_versions_body(error: ErrorCode, transaction_version: int = 2) -> Fields:
    keys = [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in supported_versions()
    ]
    body: Fields = {"error_code": int(error), "api_keys": keys}
    found = features()
    if found:
        body["supported_features"] = [
            {"name": n, "min_version": lo, "max_version": hi} for n, lo, hi in found
        ]
        body["finalized_features_epoch"] = FINALIZED_FEATURES_EPOCH
        finalized = {n: hi for n, _lo, hi in found}
        if "transaction.version" in finalized:
            finalized["transaction.version"] = transaction_version
        body["finalized_features"] = [
            {"name": n, "max_version_level": level, "min_version_level": level}
            for n, level in finalized.items()
        ]
    return body


# (version, finalized transaction.version) -> the encoded answer body. The body is the same
# for every request of a version but for throttle_time_ms (0 here): the served-version table
# and the features are fixed once the broker runs (UpdateFeatures validates and answers but
# changes no finalized level: they come from HOMES and --transaction-version, the key).
_ENCODED: dict[tuple[int, int], bytes] = {}


@handler(18)
def handle_api_versions(ctx: RequestContext, req: Fields) -> Fields | bytes:
    level = ctx.broker.config.transaction_version
    if ctx.broker.throttle.enabled(REQUEST_QUOTA):  # a throttle time may go in: the dict
        return api_versions_body(ErrorCode.NONE, level)
    key = (ctx.api_version, level)
    body = _ENCODED.get(key)
    if body is None:
        spec = lookup(18, ctx.api_version)
        assert spec is not None
        body = _ENCODED[key] = spec.encode_response(api_versions_body(ErrorCode.NONE, level))
    return body
