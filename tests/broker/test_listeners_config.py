"""Listener settings are parsed and refused as Kafka parses and refuses them."""

from __future__ import annotations

import pytest

from kgroupd.broker.config.listeners import Listener
from kgroupd.broker.config.settings import ConfigError, load_config


def listeners(*argv: str, env: dict[str, str] | None = None) -> list[Listener]:
    return load_config(list(argv), env or {}).listener_list()


def test_the_shorthand_is_one_plaintext_listener() -> None:
    (only,) = listeners("--host", "127.0.0.3", "--port", "9999", "--advertised-host", "k")
    assert (only.name, only.protocol, only.host, only.port) == (
        "PLAINTEXT",
        "PLAINTEXT",
        "127.0.0.3",
        9999,
    )
    assert (only.advertised_host, only.advertised_port) == ("k", None)


def test_named_listeners_with_advertised_addresses_and_a_map() -> None:
    got = listeners(
        "--listeners",
        "INTERNAL://0.0.0.0:9092,EXTERNAL://[::1]:19092",
        "--advertised-listeners",
        "INTERNAL://kgroupd:9092,EXTERNAL://localhost:19092",
        "--listener-security-protocol-map",
        "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    assert [(x.name, x.host, x.port, x.advertised_host, x.advertised_port) for x in got] == [
        ("INTERNAL", "0.0.0.0", 9092, "kgroupd", 9092),
        ("EXTERNAL", "::1", 19092, "localhost", 19092),
    ]
    # the environment form, and a listener left out of the advertised ones
    (only,) = listeners(env={"KGROUPD_LISTENERS": "PLAINTEXT://:0"})
    assert (only.host, only.port, only.advertised_host) == ("", 0, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listeners", "INTERNAL://:9092"], "no security protocol defined for listener INTERNAL"),
        (
            [
                "--listeners",
                "PLAINTEXT://:9092,OTHER://:9092",
                "--listener-security-protocol-map",
                "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            ],
            "different port",
        ),
        (["--listeners", "PLAINTEXT://:9092,PLAINTEXT://:9093"], "different name"),
        (
            ["--listeners", "PLAINTEXT://:9092", "--advertised-listeners", "OTHER://h:1"],
            "OTHER is not one of --listeners",
        ),
        (
            ["--listeners", "PLAINTEXT://:9092", "--advertised-listeners", "PLAINTEXT://0.0.0.0:1"],
            "non-routable",
        ),
        (["--listeners", "SSL://:9093"], "needs --ssl-certfile"),
        (["--listeners", "SASL_PLAINTEXT://:9093"], "a SASL listener needs users"),
        (["--ssl-client-auth", "required"], "needs --ssl-cafile"),
        (
            [
                "--connection-failed-authentication-delay-ms",
                "1000",
                "--connections-max-idle-ms",
                "1000",
            ],
            r"must be less than --connections-max-idle-ms \(1000\)",
        ),
        (["--listeners", "localhost:9092"], "is not NAME://HOST:PORT"),
        (["--listeners", "PLAINTEXT://h:99999"], "between 0 and 65535"),
        (["--listeners", "PLAINTEXT://:9092", "--port", "9093"], "give one form or the other"),
        (["--advertised-listeners", "PLAINTEXT://h:1"], "needs --listeners"),
        (
            ["--listeners", "PLAINTEXT://:1", "--listener-security-protocol-map", "PLAINTEXT:TLS"],
            "unknown security protocol",
        ),
    ],
)
def test_kafkas_refusals(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        listeners(*argv)


def test_an_empty_data_dir_variable_means_in_memory() -> None:
    assert load_config([], {"KGROUPD_DATA_DIR": ""}).data_dir is None
    assert load_config([], {"KGROUPD_DATA_DIR": "/var/lib/kgroupd"}).data_dir == "/var/lib/kgroupd"


def test_an_unknown_sasl_mechanism_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        load_config(["--sasl-enabled-mechanisms", "PLAIN,GSSAPI"])
    assert exc.value.code == 2
    assert "the mechanisms kgroupd offers are PLAIN" in capsys.readouterr().err


def test_the_sasl_abuse_bounds_have_kafkas_defaults_flags_and_variables() -> None:
    config = load_config([])
    assert config.sasl_server_max_receive_size == 524288
    assert config.connection_failed_authentication_delay_ms == 100
    env = {
        "KGROUPD_SASL_SERVER_MAX_RECEIVE_SIZE": "65536",
        "KGROUPD_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "0",
    }
    config = load_config([], env)
    assert config.sasl_server_max_receive_size == 65536
    assert config.connection_failed_authentication_delay_ms == 0
    flags = [
        "--sasl-server-max-receive-size",
        "4096",
        "--connection-failed-authentication-delay-ms",
        "250",
    ]
    config = load_config(flags, env)
    assert config.sasl_server_max_receive_size == 4096
    assert config.connection_failed_authentication_delay_ms == 250
