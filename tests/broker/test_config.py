import pytest

from kgroupd.broker.config.settings import (
    BrokerConfig,
    ConfigError,
    TopicSpec,
    build_parser,
    load_config,
)


def test_defaults_are_kafkas() -> None:
    c = load_config([], {})
    assert c == BrokerConfig()
    assert (c.host, c.port, c.message_max_bytes, c.offsets_partitions) == (
        "127.0.0.1",
        9092,
        1048588,
        50,
    )
    assert c.initial_rebalance_delay_ms == 3000
    assert c.group_max_size is None


def test_flag_beats_environment_which_beats_default() -> None:
    env = {"KGROUPD_PORT": "9999", "KGROUPD_NODE_ID": "3"}
    c = load_config(["--port", "1234"], env)
    assert c.port == 1234  # flag
    assert c.node_id == 3  # environment
    assert c.offsets_partitions == 50  # default


def test_retention_check_interval_is_kafkas_setting() -> None:
    assert load_config([], {}).log_retention_check_interval_ms == 300000  # Kafka's default
    c = load_config(["--log-retention-check-interval-ms", "250"], {})
    assert c.log_retention_check_interval_ms == 250
    env = {"KGROUPD_LOG_RETENTION_CHECK_INTERVAL_MS": "1000"}
    assert load_config([], env).log_retention_check_interval_ms == 1000
    assert "log.retention.check.interval.ms" in " ".join(build_parser().format_help().split())
    with pytest.raises(ConfigError, match="KGROUPD_LOG_RETENTION_CHECK_INTERVAL_MS"):
        load_config([], {"KGROUPD_LOG_RETENTION_CHECK_INTERVAL_MS": "0"})


def test_boolean_and_repeatable_flags() -> None:
    c = load_config(["--no-auto-create-topics", "--create-topic", "a:3", "--create-topic", "b:1"])
    assert c.auto_create_topics is False
    assert c.create_topics == (TopicSpec("a", 3), TopicSpec("b", 1))
    env = {"KGROUPD_AUTO_CREATE_TOPICS": "false", "KGROUPD_CREATE_TOPIC": "x:2, y:4"}
    c = load_config([], env)
    assert c.auto_create_topics is False
    assert c.create_topics == (TopicSpec("x", 2), TopicSpec("y", 4))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KGROUPD_AUTO_CREATE_TOPICS": "yes"}, "KGROUPD_AUTO_CREATE_TOPICS"),
        ({"KGROUPD_PORT": "http"}, "KGROUPD_PORT"),
        ({"KGROUPD_PORT": "70000"}, "KGROUPD_PORT"),
        ({"KGROUPD_CREATE_TOPIC": "nopartitions"}, "KGROUPD_CREATE_TOPIC"),
        ({"KGROUPD_LOG_FORMAT": "xml"}, "--log-format"),
        ({"KGROUPD_FSYNC": "interval"}, "--fsync needs --data-dir"),
        ({"KGROUPD_RECOVER": "true"}, "--recover needs --data-dir"),
        ({"KGROUPD_DATA_DIR": "/tmp/x", "KGROUPD_FSYNC": "sometimes"}, "--fsync must be"),
        ({"KGROUPD_RECOVER": "maybe"}, "KGROUPD_RECOVER"),
        (
            {
                "KGROUPD_GROUP_MIN_SESSION_TIMEOUT_MS": "10",
                "KGROUPD_GROUP_MAX_SESSION_TIMEOUT_MS": "5",
            },
            "min-session",
        ),
    ],
)
def test_bad_environment_values_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config([], env)


@pytest.mark.parametrize(
    "argv",
    [["--port", "-1"], ["--default-partitions", "0"], ["--create-topic", "t:0"], ["--bogus"]],
)
def test_bad_flags_exit_with_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        load_config(argv, {})
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_advertised_address() -> None:
    assert BrokerConfig().advertised(5555) == ("127.0.0.1", 5555)
    assert BrokerConfig(advertised_host="kgroupd", advertised_port=1).advertised(5555) == (
        "kgroupd",
        1,
    )
    host, _ = BrokerConfig(host="0.0.0.0").advertised(1)
    assert host not in ("0.0.0.0", "")


def test_durability_settings() -> None:
    c = load_config(["--data-dir", "/tmp/d"], {})
    assert (c.fsync_mode, c.fsync_interval_ms, c.recover) == ("always", 1000, False)
    c = load_config(
        ["--data-dir", "/tmp/d", "--fsync", "interval", "--fsync-interval-ms", "50", "--recover"],
        {},
    )
    assert (c.fsync_mode, c.fsync_interval_ms, c.recover) == ("interval", 50, True)


def test_consumer_group_settings_have_kafkas_names_and_defaults() -> None:
    c = load_config([], {})
    assert c.group_consumer_session_timeout_ms == 45000
    assert c.group_consumer_heartbeat_interval_ms == 5000
    assert (c.group_consumer_min_session_timeout_ms, c.group_consumer_max_session_timeout_ms) == (
        45000,
        60000,
    )
    assert c.group_consumer_assignors == ("uniform", "range")
    assert c.group_consumer_migration_policy == "bidirectional"
    c = load_config(
        [
            "--group-consumer-min-session-timeout-ms=1000",
            "--group-consumer-session-timeout-ms=2000",
            "--group-consumer-min-heartbeat-interval-ms=100",
            "--group-consumer-heartbeat-interval-ms=500",
            "--group-consumer-assignors=range,uniform",
        ],
        {
            "KGROUPD_GROUP_CONSUMER_MIGRATION_POLICY": "Upgrade",
            "KGROUPD_GROUP_CONSUMER_MAX_SIZE": "3",
        },
    )
    assert c.group_consumer_session_timeout_ms == 2000
    assert c.group_consumer_heartbeat_interval_ms == 500
    assert c.group_consumer_assignors == ("range", "uniform")
    assert c.group_consumer_migration_policy == "upgrade"
    assert c.group_consumer_max_size == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--group-consumer-session-timeout-ms=1000"], "must lie within"),
        (["--group-consumer-heartbeat-interval-ms=100"], "must lie within"),
        (
            [
                "--group-consumer-min-heartbeat-interval-ms=100",
                "--group-consumer-max-heartbeat-interval-ms=100000",
                "--group-consumer-heartbeat-interval-ms=50000",
            ],
            "less than",
        ),
    ],
)
def test_consumer_group_settings_are_checked_as_kafka_checks_them(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(argv, {})


def test_unknown_server_assignor_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load_config(["--group-consumer-assignors=sticky"], {})
    assert "unknown assignor 'sticky'" in capsys.readouterr().err


def test_memory_bounds_are_flags_and_environment_variables() -> None:
    defaults = load_config([], {})
    assert (defaults.log_cache_bytes, defaults.max_memory_bytes) == (64 * 1024 * 1024, None)
    config = load_config(["--log-cache-bytes", "4096"], {"KGROUPD_MAX_MEMORY_BYTES": "8192"})
    assert (config.log_cache_bytes, config.max_memory_bytes) == (4096, 8192)
    help_text = build_parser().format_help()
    assert "KGROUPD_LOG_CACHE_BYTES" in help_text and "KGROUPD_MAX_MEMORY_BYTES" in help_text
    with pytest.raises(ConfigError, match="KGROUPD_MAX_MEMORY_BYTES"):
        load_config([], {"KGROUPD_MAX_MEMORY_BYTES": "0"})


def test_log_cleaner_settings_are_kafkas() -> None:
    c = load_config([], {})
    assert c.log_cleaner_enable is True  # Kafka: log.cleaner.enable
    assert c.log_cleaner_backoff_ms == 15000  # log.cleaner.backoff.ms
    assert c.log_cleaner_io_max_bytes_per_second is None  # unbounded, as Kafka's
    assert c.log_cleaner_dedupe_buffer_size == 128 * 1024 * 1024
    c = load_config(
        ["--log-cleaner-enable", "false", "--log-cleaner-io-max-bytes-per-second", "1000"],
        {"KGROUPD_LOG_CLEANER_BACKOFF_MS": "50"},
    )
    assert (c.log_cleaner_enable, c.log_cleaner_backoff_ms) == (False, 50)
    assert c.log_cleaner_io_max_bytes_per_second == 1000
    with pytest.raises(ConfigError, match="KGROUPD_LOG_CLEANER_ENABLE"):
        load_config([], {"KGROUPD_LOG_CLEANER_ENABLE": "maybe"})
    with pytest.raises(SystemExit):
        load_config(["--log-cleaner-backoff-ms", "0"], {})
