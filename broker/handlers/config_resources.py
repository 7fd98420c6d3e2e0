"""ListConfigResources v0-v1 (KIP-1142; v0 was ListClientMetricsResources), as Kafka 4.3's
KafkaApis answers it: the config resources of the types asked for (none: every type the
version supports), in Kafka's order: groups with dynamic configs, client metrics resources,
broker loggers, brokers, topics (those the principal may DESCRIBE_CONFIGS). v0 supports only
CLIENT_METRICS; v1 TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS and GROUP; any other type asked
for is UNSUPPORTED_VERSION. kgroupd has no client metrics resources and no broker loggers
(DescribeConfigs does not serve them), so it lists none of those.
"""

from __future__ import annotations

from kgroupd.broker.handlers.metadata import TRANSACTION_STATE
from kgroupd.broker.handlers.registry import Fields, RequestContext, handler
from kgroupd.broker.security.rules import TOPIC_DESCRIBE_CONFIGS
from kgroupd.protocol.errors import ErrorCode

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
V0_TYPES = (CLIENT_METRICS,)
V1_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


@handler(74)
def handle_list_config_resources(ctx: RequestContext, req: Fields) -> Fields:
    supported = V0_TYPES if ctx.api_version == 0 else V1_TYPES
    wanted = req["resource_types"] or list(supported)
    if any(t not in supported for t in wanted):
        return {"error_code": int(ErrorCode.UNSUPPORTED_VERSION), "config_resources": []}
    broker = ctx.broker
    out: list[Fields] = []
    if GROUP in wanted:
        out += [_entry(g, GROUP) for g in sorted(broker.group_configs.all_overrides())]
    if BROKER in wanted:
        out.append(_entry(str(broker.node_id), BROKER))
    if TOPIC in wanted:
        topics = broker.topics
        names = [*topics.topics, *topics.internal]
        if broker.transactions.used:
            names.append(TRANSACTION_STATE)
        out += [_entry(n, TOPIC) for n in names if not ctx.denies(TOPIC_DESCRIBE_CONFIGS, n)]
    return {"error_code": 0, "config_resources": out}


def _entry(name: str, resource_type: int) -> Fields:
    return {"resource_name": name, "resource_type": resource_type}
