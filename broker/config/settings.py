"""Broker settings: command-line flags, ``KGROUPD_*`` environment variables and defaults.

A flag beats its environment variable, which beats the default (Kafka's, where Kafka has one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from kgroupd.broker.config import cleaner as cleaner_options
from kgroupd.broker.config import groups as group_options
from kgroupd.broker.config import http as http_options
from kgroupd.broker.config import security as security_options
from kgroupd.broker.config import storage as storage_options
from kgroupd.broker.config.listeners import Listener, ListenerError, build_listeners
from kgroupd.broker.config.types import at_least_one, non_negative, port, truth
from kgroupd.broker.config.version import version


def new_cluster_id() -> str:
    """Kafka's cluster ids are a random UUID in URL-safe base64 without padding."""
    import base64
    import uuid

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConfigError(Exception):
    """A setting that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int


@dataclass(frozen=True)
class BrokerConfig(cleaner_options.CleanerSettings):
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    listeners: str | None = (
        None  # Kafka-style (kgroupd.broker.config.listeners); unset: PLAINTEXT host:port
    )
    advertised_listeners: str | None = None
    listener_security_protocol_map: str | None = None
    ssl_certfile: str | None = None  # TLS and SASL (kgroupd.broker.config.security)
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"  # Kafka: ssl.client.auth
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    sasl_users: str | None = None
    connections_max_reauth_ms: int = 0  # Kafka: connections.max.reauth.ms (0: off)
    sasl_server_max_receive_size: int = 524288  # Kafka: sasl.server.max.receive.size
    connection_failed_authentication_delay_ms: int = 100  # Kafka: the same name
    authorizer: str | None = None  # "acl" (Kafka: authorizer.class.name)
    super_users: str | None = None  # Kafka: super.users
    allow_everyone_if_no_acl_found: bool = False
    node_id: int = 0
    nodes: int = 1  # --nodes: simulated nodes served by this process (kgroupd.broker.nodes)
    cluster_id: str | None = None
    data_dir: str | None = None
    log_format: str | None = None  # json | console; None: json off a TTY
    log_level: str = "info"
    auto_create_topics: bool = True
    default_partitions: int = 1
    max_partitions: int = 100_000
    max_connections_per_ip: int | None = None  # Kafka: max.connections.per.ip (unbounded)
    max_connections: int | None = None  # Kafka: max.connections (unbounded)
    # Kafka: queued.max.request.bytes (unbounded there); None: unbounded (-1 on the command line)
    queued_max_request_bytes: int | None = 256 * 1024 * 1024
    connections_max_idle_ms: int = 600_000  # Kafka: connections.max.idle.ms
    incomplete_request_timeout_ms: int = 30_000  # kgroupd's own
    log_retention_check_interval_ms: int = 300_000  # Kafka: log.retention.check.interval.ms
    create_topics: tuple[TopicSpec, ...] = field(default_factory=tuple)
    max_request_bytes: int = 104857600
    message_max_bytes: int = 1048588
    offsets_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int | None = None
    offsets_retention_minutes: int = 10080
    # KIP-848 consumer groups (Kafka's group.consumer.* settings and defaults)
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_max_session_timeout_ms: int = 60000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15000
    group_consumer_max_size: int | None = None
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_migration_policy: str = "bidirectional"
    group_consumer_regex_refresh_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    # KIP-932 share groups (Kafka's group.share.* settings and defaults)
    group_share_session_timeout_ms: int = 45000
    group_share_min_session_timeout_ms: int = 45000
    group_share_max_session_timeout_ms: int = 60000
    group_share_heartbeat_interval_ms: int = 5000
    group_share_min_heartbeat_interval_ms: int = 5000
    group_share_max_heartbeat_interval_ms: int = 15000
    group_share_max_size: int = 200
    group_share_delivery_count_limit: int = 5
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    group_share_record_lock_duration_ms: int = 30000
    group_share_min_record_lock_duration_ms: int = 15000
    group_share_max_record_lock_duration_ms: int = 60000
    group_share_partition_max_record_locks: int = 2000
    group_share_min_partition_max_record_locks: int = 100
    group_share_max_partition_max_record_locks: int = 10000
    group_share_max_share_sessions: int = 2000
    # Transactions (Kafka's transaction.* settings and defaults)
    transaction_partitions: int = 50
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transactional_id_expiration_ms: int = 604800000
    transaction_version: int = 2
    fsync: str | None = None  # always | interval | never; None: always (with --data-dir)
    fsync_interval_ms: int = 1000
    recover: bool = False
    snapshot_log_bytes: int = 64 * 1024 * 1024
    log_cache_bytes: int = storage_options.DEFAULT_LOG_CACHE_BYTES  # with --data-dir
    log_index_interval_bytes: int | None = None  # Kafka: log.index.interval.bytes; None: 4096
    log_roll_ms: int | None = None  # Kafka: log.roll.ms; None: log_roll_hours
    log_roll_hours: int = 168  # Kafka: log.roll.hours
    log_roll_jitter_ms: int | None = None  # Kafka: log.roll.jitter.ms; None: the hours
    log_roll_jitter_hours: int = 0  # Kafka: log.roll.jitter.hours
    max_memory_bytes: int | None = None  # in memory; None: a quarter of the machine's
    # the HTTP listener and metrics (kgroupd.broker.config.http)
    http: bool = True
    test_controls: bool = False  # /api/test/*: injected errors, the clock (docs/testing.md)
    http_host: str | None = None  # None: 127.0.0.1 or the first Kafka listener's host
    http_port: int | None = None  # None: 8080, or a free port when 8080 is taken
    http_auth_token_file: str | None = None  # kgroupd.broker.http.auth
    http_ssl: bool = False
    metrics: bool = True
    metrics_max_groups: int = 1000

    @property
    def fsync_mode(self) -> str:
        return self.fsync or "always"

    def listener_list(self) -> list[Listener]:
        """The listeners to bind (``kgroupd.broker.config.listeners``); ``ConfigError`` for bad
        settings."""
        try:
            return build_listeners(
                self.listeners,
                self.advertised_listeners,
                self.listener_security_protocol_map,
                self.host,
                self.port,
                self.advertised_host,
                self.advertised_port,
            )
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None

    def advertised(self, bound_port: int) -> tuple[str, int]:
        host = self.advertised_host
        if host is None:
            import socket

            host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        return host, self.advertised_port or bound_port


def _transaction_version(text: str) -> int:
    value = non_negative(text)
    if value not in (1, 2):
        raise argparse.ArgumentTypeError("must be 1 or 2")
    return value


def _bytes_or_unbounded(text: str) -> int | None:
    """A byte count of at least 1, or -1 for no limit (as Kafka writes it)."""
    if text.strip() == "-1":
        return None
    return at_least_one(text)


def _node_count(text: str) -> int:
    value = at_least_one(text)
    if value > 16:
        raise argparse.ArgumentTypeError("must be from 1 to 16")
    return value


def _topic_spec(text: str) -> TopicSpec:
    from kgroupd.broker.log.topics import TopicError, validate_topic_name

    name, sep, count = text.rpartition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:PARTITIONS")
    try:
        validate_topic_name(name)
    except TopicError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return TopicSpec(name, at_least_one(count))


# (flag, dest, type, help). Defaults come from BrokerConfig.
_OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    ("--host", "host", str, "address to listen on"),
    ("--port", "port", port, "port to listen on; 0 binds a free port (logged as 'listening')"),
    (
        "--advertised-host",
        "advertised_host",
        str,
        "host given to clients in Metadata (default: --host; the hostname when it is 0.0.0.0)",
    ),
    (
        "--advertised-port",
        "advertised_port",
        port,
        "port given to clients in Metadata (default: the bound port)",
    ),
    (
        "--listeners",
        "listeners",
        str,
        "NAME://HOST:PORT[,...] to listen on (Kafka: listeners); replaces --host/--port",
    ),
    (
        "--advertised-listeners",
        "advertised_listeners",
        str,
        "NAME://HOST:PORT[,...] given to clients that reach each listener "
        "(Kafka: advertised.listeners; default: as each listens)",
    ),
    (
        "--listener-security-protocol-map",
        "listener_security_protocol_map",
        str,
        "NAME:PROTOCOL[,...] (Kafka: listener.security.protocol.map; default maps PLAINTEXT, "
        "SSL, SASL_PLAINTEXT and SASL_SSL to themselves)",
    ),
    ("--node-id", "node_id", non_negative, "this broker's node id"),
    (
        "--nodes",
        "nodes",
        _node_count,
        "serve N simulated nodes (1-16) with ids from --node-id, each on its own port of each "
        "listener (the next ports, or free ports for port 0), for testing failover with "
        "--test-controls (docs/testing.md); one data store, no replication",
    ),
    (
        "--cluster-id",
        "cluster_id",
        str,
        "cluster id (default: generated; kept in the data dir when there is one)",
    ),
    (
        "--data-dir",
        "data_dir",
        str,
        "directory for committed offsets, group state and topic data (unset: everything in memory)",
    ),
    *storage_options.OPTIONS,
    ("--log-format", "log_format", str, "json or console (default: json off a TTY)"),
    ("--log-level", "log_level", str, "debug, info, warning or error"),
    (
        "--default-partitions",
        "default_partitions",
        at_least_one,
        "partitions of auto-created topics (Kafka: num.partitions)",
    ),
    (
        "--max-connections-per-ip",
        "max_connections_per_ip",
        at_least_one,
        "connections one client address may hold; new ones over it are closed at once "
        "(Kafka: max.connections.per.ip; default: unbounded)",
    ),
    (
        "--max-connections",
        "max_connections",
        at_least_one,
        "connections the broker holds at most; at the limit it stops accepting until one "
        "closes (Kafka: max.connections; default: unbounded)",
    ),
    (
        "--queued-max-request-bytes",
        "queued_max_request_bytes",
        _bytes_or_unbounded,
        "request bytes read but not yet handled, across all connections, claimed as they "
        "arrive; a connection that would pass it stops reading until memory frees, unless "
        "the rest of its frame fits in one request's overdraft (Kafka: "
        "queued.max.request.bytes; -1: unbounded)",
    ),
    (
        "--connections-max-idle-ms",
        "connections_max_idle_ms",
        at_least_one,
        "close a connection that sent nothing for this long (Kafka: connections.max.idle.ms)",
    ),
    (
        "--incomplete-request-timeout-ms",
        "incomplete_request_timeout_ms",
        at_least_one,
        "close a connection whose request frame stays incomplete this long, from its size "
        "prefix on, waits for memory not counted (kgroupd's own: a client trickling bytes "
        "holds no buffer forever)",
    ),
    (
        "--log-retention-check-interval-ms",
        "log_retention_check_interval_ms",
        at_least_one,
        "how often retention deletes what topics' retention.ms and retention.bytes no longer "
        "keep (Kafka: log.retention.check.interval.ms)",
    ),
    (
        "--max-partitions",
        "max_partitions",
        at_least_one,
        "the most partitions all topics may have together (kgroupd's own; internal topics "
        "not counted): a CreateTopics or CreatePartitions past it is refused with "
        "POLICY_VIOLATION",
    ),
    (
        "--max-request-bytes",
        "max_request_bytes",
        at_least_one,
        "largest request frame accepted (Kafka: socket.request.max.bytes)",
    ),
    (
        "--message-max-bytes",
        "message_max_bytes",
        at_least_one,
        "largest record batch accepted (Kafka: message.max.bytes)",
    ),
    (
        "--transaction-partitions",
        "transaction_partitions",
        at_least_one,
        "transaction coordinator shards (Kafka: transaction.state.log.num.partitions)",
    ),
    (
        "--transaction-max-timeout-ms",
        "transaction_max_timeout_ms",
        at_least_one,
        "the longest transaction timeout a producer may ask for "
        "(Kafka: transaction.max.timeout.ms)",
    ),
    (
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms",
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        at_least_one,
        "how often transactions past their timeout are aborted "
        "(Kafka: transaction.abort.timed.out.transaction.cleanup.interval.ms)",
    ),
    (
        "--transactional-id-expiration-ms",
        "transactional_id_expiration_ms",
        at_least_one,
        "idle transactional ids are forgotten after this (Kafka: transactional.id.expiration.ms)",
    ),
    (
        "--transaction-version",
        "transaction_version",
        _transaction_version,
        "the finalized transaction.version advertised: 2 (KIP-890: partitions added by "
        "Produce and TxnOffsetCommit, an epoch bump per transaction) or 1",
    ),
    *group_options.OPTIONS,
    *security_options.OPTIONS,
    *http_options.OPTIONS,
    *cleaner_options.OPTIONS,
]


# (flag without --, BrokerConfig field, help): --FLAG / --no-FLAG, KGROUPD_<FIELD>=true|false
BOOL_OPTIONS: list[tuple[str, str, str]] = [
    (
        "auto-create-topics",
        "auto_create_topics",
        "create unknown topics on Metadata requests (Kafka: auto.create.topics.enable)",
    ),
    (
        "recover",
        "recover",
        "start even when a data file is damaged: keep what precedes the damage, drop the "
        "rest (and say how much)",
    ),
    *http_options.BOOL_OPTIONS,
]
_BOOLS = {dest for _, dest, _ in BOOL_OPTIONS}


def env_name(dest: str) -> str:
    """KGROUPD_ plus the flag's name: --create-topic is KGROUPD_CREATE_TOPIC."""
    return "KGROUPD_" + ("create_topic" if dest == "create_topics" else dest).upper()


class _OneLineErrors(argparse.ArgumentParser):
    """A bad flag is one line on stderr and exit code 2 (argparse would print the whole
    usage first: forty lines for one typo)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    defaults = BrokerConfig()
    parser = _OneLineErrors(
        prog="kgroupd",
        description="A Kafka-compatible broker with an exact consumer-group coordinator. "
        "Every flag can also be set as an environment variable KGROUPD_<NAME> "
        "(e.g. KGROUPD_PORT=9093, booleans true|false); a flag beats the variable, "
        "which beats the default.",
    )
    parser.add_argument(
        "--version", action="version", version=f"kgroupd {version()}", help="print the version"
    )
    for flag, dest, typ, text in _OPTIONS:
        default = getattr(defaults, dest)
        shown = "unset" if default is None else default
        if isinstance(default, tuple):
            shown = ",".join(default)
        parser.add_argument(
            flag, dest=dest, type=typ, default=None, help=f"{text} [{env_name(dest)}; {shown}]"
        )
    for flag, dest, text in BOOL_OPTIONS:
        shown = str(getattr(defaults, dest)).lower()
        parser.add_argument(
            f"--{flag}",
            dest=dest,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{text} [{env_name(dest)}; {shown}]",
        )
    parser.add_argument(
        "--create-topic",
        dest="create_topics",
        type=_topic_spec,
        action="append",
        default=None,
        metavar="NAME:PARTITIONS",
        help="create this topic at start-up; repeatable "
        f"[{env_name('create_topics')}, comma-separated; none]",
    )
    return parser


_ENV_TYPES: dict[str, Callable[[str], Any]] = {dest: typ for _, dest, typ, _ in _OPTIONS}


def _from_env(dest: str, raw: str) -> object:
    try:
        if dest in _BOOLS:
            return truth(raw)
        if dest == "create_topics":
            return tuple(_topic_spec(p.strip()) for p in raw.split(",") if p.strip())
        conv = _ENV_TYPES[dest]
        return conv(raw)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise ConfigError(f"{env_name(dest)}: {exc}") from None


def load_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Parse flags and environment into a validated config (argparse exits on bad flags)."""
    env = os.environ if environ is None else environ
    args = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    values: dict[str, object] = {}
    for dest in [*_ENV_TYPES, *_BOOLS, "create_topics"]:
        flag_value = getattr(args, dest)
        if flag_value is not None:
            values[dest] = tuple(flag_value) if dest == "create_topics" else flag_value
        elif env_name(dest) in env:
            values[dest] = _from_env(dest, env[env_name(dest)])
    shorthand = [k for k in ("host", "port", "advertised_host", "advertised_port") if k in values]
    if "listeners" in values and shorthand:
        flags = ", ".join("--" + k.replace("_", "-") for k in shorthand)
        raise ConfigError(f"--listeners replaces {flags}: give one form or the other")
    if values.get("data_dir") == "":
        values["data_dir"] = None  # KGROUPD_DATA_DIR= (empty): in memory
    config = BrokerConfig(**values)  # type: ignore[arg-type]
    validate(config)
    return config


def validate(config: BrokerConfig) -> None:
    if config.log_format not in (None, "json", "console"):
        raise ConfigError(f"--log-format must be json or console, not {config.log_format!r}")
    if config.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(
            f"--log-level must be debug, info, warning or error, not {config.log_level!r}"
        )
    problem = group_options.check(config)
    if problem is not None:
        raise ConfigError(problem)
    if config.fsync not in (None, "always", "interval", "never"):
        raise ConfigError(f"--fsync must be always, interval or never, not {config.fsync!r}")
    if config.data_dir is None and config.fsync is not None:
        raise ConfigError("--fsync needs --data-dir (without it nothing is written to disk)")
    if config.data_dir is None and config.recover:
        raise ConfigError("--recover needs --data-dir")
    if config.message_max_bytes > config.max_request_bytes:
        raise ConfigError("--message-max-bytes is above --max-request-bytes")
    problem = security_options.check(config, config.listener_list())  # Kafka's reasons
    if problem is None:
        problem = http_options.check(config)
    if problem is not None:
        raise ConfigError(problem)
