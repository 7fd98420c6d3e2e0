"""One module per API. Importing this package registers every handler."""

from kgroupd.broker.handlers import (  # noqa: F401
    acls,
    admin,
    api_versions,
    cluster,
    configs,
    consumer_groups,
    delete_records,
    fetch,
    group_offsets,
    groups,
    groups_admin,
    metadata,
    offsets_list,
    produce,
    quotas,
    replication,
    security,
    share,
    telemetry,
    transactions,
)
from kgroupd.broker.handlers.registry import HANDLERS, RequestContext, handler, supported_versions

__all__ = ["HANDLERS", "RequestContext", "handler", "supported_versions"]
