"""The GROUP config resource's rules (Kafka 4.3's GroupConfig) and the --group-share-* flags."""

from __future__ import annotations

import pytest

from kgroupd.broker.config.settings import BrokerConfig, ConfigError, load_config
from kgroupd.broker.share.group_config import CONFIG_DEFS, GroupConfigError, GroupConfigs, validate

KAFKA_4_3_GROUP_CONFIGS = {
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.renew.acknowledge.enable": "true",
    "streams.session.timeout.ms": "45000",
    "streams.heartbeat.interval.ms": "5000",
    "streams.num.standby.replicas": "0",
    "streams.initial.rebalance.delay.ms": "3000",
}


def test_every_group_config_with_kafka_defaults() -> None:
    configs = GroupConfigs(BrokerConfig())
    described = {name: (value, own) for name, value, _kind, own in configs.describe("g")}
    assert described == {k: (v, False) for k, v in KAFKA_4_3_GROUP_CONFIGS.items()}
    assert set(CONFIG_DEFS) == set(KAFKA_4_3_GROUP_CONFIGS)


def test_broker_flags_are_the_defaults() -> None:
    config = load_config(
        [
            "--group-share-record-lock-duration-ms",
            "20000",
            "--group-share-delivery-count-limit",
            "3",
        ]
    )
    described = {name: value for name, value, _k, _o in GroupConfigs(config).describe("g")}
    assert described["share.record.lock.duration.ms"] == "20000"
    assert described["share.delivery.count.limit"] == "3"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--group-share-delivery-count-limit", "11"], "value must be between 2 and 10"),
        (["--group-share-record-lock-duration-ms", "999"], "between 1000 and 3600000"),
        (["--group-share-max-size", "1001"], "between 1 and 1000"),
    ],
)
def test_share_flags_refuse_values_outside_kafka_bounds(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        load_config(argv)
    assert message in capsys.readouterr().err


def test_share_flags_checked_against_each_other() -> None:
    with pytest.raises(ConfigError, match="--group-share-heartbeat-interval-ms must lie within"):
        load_config(["--group-share-heartbeat-interval-ms", "20000"])
    with pytest.raises(ConfigError, match="must be less than --group-share-session-timeout-ms"):
        load_config(
            [
                "--group-share-min-heartbeat-interval-ms",
                "1",
                "--group-share-max-heartbeat-interval-ms",
                "100000",
                "--group-share-heartbeat-interval-ms",
                "50000",
            ]
        )


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"no.such": "1"}, "Unknown group config name: no.such"),
        (
            {"share.record.lock.duration.ms": "x"},
            "Invalid value x for configuration share.record.lock.duration.ms: "
            "Not a number of type INT",
        ),
        (
            {"share.record.lock.duration.ms": "999"},
            "Invalid value 999 for configuration share.record.lock.duration.ms: "
            "Value must be at least 1000",
        ),
        (
            {"share.record.lock.duration.ms": "10000"},
            "share.record.lock.duration.ms must be greater than or equal to "
            "group.share.min.record.lock.duration.ms",
        ),
        (
            {"share.record.lock.duration.ms": "70000"},
            "share.record.lock.duration.ms must be less than or equal to "
            "group.share.max.record.lock.duration.ms",
        ),
        (
            {"share.delivery.count.limit": "11"},
            "share.delivery.count.limit must be less than or equal to "
            "group.share.max.delivery.count.limit",
        ),
        (
            {"share.isolation.level": "hello"},
            "Invalid value hello for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted",
        ),
        (
            {"share.renew.acknowledge.enable": "1"},
            "Invalid value 1 for configuration share.renew.acknowledge.enable: "
            "Expected value to be either true or false",
        ),
        (
            {"consumer.heartbeat.interval.ms": "4000"},
            "consumer.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"streams.num.standby.replicas": "3"},
            "streams.num.standby.replicas must be less than or equal to "
            "group.streams.max.standby.replicas",
        ),
    ],
)
def test_kafka_refusals(props: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError) as info:
        validate(props, BrokerConfig())
    assert str(info.value) == message


def test_session_timeout_must_exceed_heartbeat() -> None:
    settings = BrokerConfig(
        group_share_min_heartbeat_interval_ms=1000,
        group_share_max_heartbeat_interval_ms=50000,
    )
    with pytest.raises(GroupConfigError) as info:
        validate({"share.heartbeat.interval.ms": "45000"}, settings)
    assert (
        str(info.value)
        == "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"
    )


def test_accepted_values_and_effective_values() -> None:
    validate(
        {
            "share.auto.offset.reset": "by_duration:PT1H",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": " 15000 ",
        },
        BrokerConfig(),
    )
    configs = GroupConfigs(BrokerConfig())
    configs.set_overrides("g", {"share.record.lock.duration.ms": "20000"})
    assert configs.int_value("g", "share.record.lock.duration.ms") == 20000
    assert configs.int_value("other", "share.record.lock.duration.ms") == 30000
    # the broker's bounds may narrow after a group set its value: clamped into them
    narrowed = GroupConfigs(BrokerConfig(group_share_min_record_lock_duration_ms=25000))
    narrowed.set_overrides("g", {"share.record.lock.duration.ms": "20000"})
    assert narrowed.int_value("g", "share.record.lock.duration.ms") == 25000
    configs.set_overrides("g", {})
    assert configs.overrides("g") == {}
