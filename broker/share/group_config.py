"""The GROUP config resource (resource type 32): Kafka 4.3's per-group configs.

A group's dynamic configs (IncrementalAlterConfigs / AlterConfigs on a GROUP resource) override
the broker-level defaults (``--group-consumer-*``, ``--group-share-*``, and Kafka's defaults for
the streams ones kgroupd has no flags for). The checks, their order and their messages are those
of Kafka's ``GroupConfig.validate``: unknown names first, then each value's type and bound, then
the broker's min/max for each, then session timeouts above heartbeat intervals. Every failure is
INVALID_CONFIG. The effective value of a config a group sets outside the broker's current bounds
(the bounds may have changed since) is clamped into them, as Kafka's ``GroupConfig.evaluate``.

Pure: no I/O, no wire structs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kgroupd.broker.config.groups import GroupSettings as BrokerGroupSettings

INT, STRING, BOOLEAN = "int", "string", "boolean"
# Kafka's DescribeConfigsResponse.ConfigType ids
CONFIG_TYPE_IDS = {BOOLEAN: 1, STRING: 2, INT: 3}

# Kafka's GroupCoordinatorConfig defaults for the streams groups kgroupd does not serve: the
# configs exist on every group all the same.
STREAMS_SESSION_TIMEOUT_MS = (45000, 45000, 60000)  # default, min, max
STREAMS_HEARTBEAT_INTERVAL_MS = (5000, 5000, 15000)
STREAMS_NUM_STANDBY_REPLICAS = 0
STREAMS_MAX_STANDBY_REPLICAS = 2
STREAMS_INITIAL_REBALANCE_DELAY_MS = 3000

_BY_DURATION = re.compile(
    r"by_duration:P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE
)


def by_duration_ms(value: str) -> int | None:
    """The milliseconds of a ``by_duration:PnDTnHnMn.nS`` reset, None if it is not one."""
    m = _BY_DURATION.fullmatch(value.strip())
    if m is None:
        return None
    days, hours, minutes, seconds = m.groups()
    total = float(seconds or 0) + 60 * (
        int(minutes or 0) + 60 * (int(hours or 0) + 24 * int(days or 0))
    )
    return int(total * 1000)


class GroupConfigError(Exception):
    """A group config Kafka refuses (INVALID_CONFIG), with Kafka's message."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One group config: its type, its own bound (Kafka's ConfigDef validator) and, for ints,
    the broker settings that default and bound it: (default, min, max) by name."""

    name: str
    kind: str
    at_least: int | None = None
    choices: tuple[str, ...] = ()
    broker: Callable[[BrokerGroupSettings], tuple[int, int | None, int | None]] | None = None
    fixed_default: str = ""
    min_name: str = ""  # Kafka's broker config names in the bound messages
    max_name: str = ""


def _trio(prefix: str, name: str) -> Callable[[BrokerGroupSettings], tuple[int, int, int]]:
    def get(c: BrokerGroupSettings) -> tuple[int, int, int]:
        return (
            getattr(c, f"{prefix}_{name}"),
            getattr(c, f"{prefix}_min_{name}"),
            getattr(c, f"{prefix}_max_{name}"),
        )

    return get


def _int_def(name: str, at_least: int, kind: str, setting: str) -> ConfigDef:
    """``consumer.session.timeout.ms`` bounded by ``group.consumer.{min,max}.session...``."""
    suffix = setting.replace("_", ".")
    return ConfigDef(
        name,
        INT,
        at_least=at_least,
        broker=_trio(f"group_{kind}", setting),
        min_name=f"group.{kind}.min.{suffix}",
        max_name=f"group.{kind}.max.{suffix}",
    )


def _streams(
    value: tuple[int, int, int],
) -> Callable[[BrokerGroupSettings], tuple[int, int, int]]:
    return lambda _c: value


CONFIG_DEFS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        _int_def("consumer.session.timeout.ms", 1, "consumer", "session_timeout_ms"),
        _int_def("consumer.heartbeat.interval.ms", 1, "consumer", "heartbeat_interval_ms"),
        _int_def("share.session.timeout.ms", 1, "share", "session_timeout_ms"),
        _int_def("share.heartbeat.interval.ms", 1, "share", "heartbeat_interval_ms"),
        _int_def("share.record.lock.duration.ms", 1000, "share", "record_lock_duration_ms"),
        _int_def("share.delivery.count.limit", 2, "share", "delivery_count_limit"),
        _int_def("share.partition.max.record.locks", 100, "share", "partition_max_record_locks"),
        ConfigDef("share.auto.offset.reset", STRING, fixed_default="latest"),
        ConfigDef(
            "share.isolation.level",
            STRING,
            choices=("read_committed", "read_uncommitted"),
            fixed_default="read_uncommitted",
        ),
        ConfigDef("share.renew.acknowledge.enable", BOOLEAN, fixed_default="true"),
        ConfigDef(
            "streams.session.timeout.ms",
            INT,
            at_least=1,
            broker=_streams(STREAMS_SESSION_TIMEOUT_MS),
            min_name="group.streams.min.session.timeout.ms",
            max_name="group.streams.max.session.timeout.ms",
        ),
        ConfigDef(
            "streams.heartbeat.interval.ms",
            INT,
            at_least=1,
            broker=_streams(STREAMS_HEARTBEAT_INTERVAL_MS),
            min_name="group.streams.min.heartbeat.interval.ms",
            max_name="group.streams.max.heartbeat.interval.ms",
        ),
        ConfigDef(
            "streams.num.standby.replicas",
            INT,
            at_least=0,
            broker=lambda _c: (STREAMS_NUM_STANDBY_REPLICAS, None, STREAMS_MAX_STANDBY_REPLICAS),
            max_name="group.streams.max.standby.replicas",
        ),
        ConfigDef(
            "streams.initial.rebalance.delay.ms",
            INT,
            at_least=0,
            broker=lambda _c: (STREAMS_INITIAL_REBALANCE_DELAY_MS, None, None),
        ),
    ]
}

# session timeout -> heartbeat interval: the session must be the greater
_SESSION_ABOVE_HEARTBEAT = [
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
]


def default_of(d: ConfigDef, settings: BrokerGroupSettings) -> str:
    if d.broker is not None:
        return str(d.broker(settings)[0])
    return d.fixed_default


def _invalid(name: str, value: str, reason: str) -> GroupConfigError:
    return GroupConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def _parse(d: ConfigDef, raw: str) -> int | str | bool:
    """Kafka's ConfigDef.parse of one value, with its validator."""
    text = raw.strip()
    if d.kind == INT:
        try:
            value = int(text)
        except ValueError:
            raise _invalid(d.name, raw, "Not a number of type INT") from None
        if not -(2**31) <= value < 2**31:
            raise _invalid(d.name, raw, "Not a number of type INT")
        if d.at_least is not None and value < d.at_least:
            raise _invalid(d.name, raw, f"Value must be at least {d.at_least}")
        return value
    if d.kind == BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _invalid(d.name, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if d.choices and text not in d.choices:
        raise _invalid(d.name, raw, "String must be one of: " + ", ".join(d.choices))
    if d.name == "share.auto.offset.reset":
        low = text.lower()
        if low not in ("earliest", "latest") and _BY_DURATION.fullmatch(text) is None:
            raise _invalid(
                d.name,
                raw,
                "the value must be either 'earliest', 'latest' or of the format "
                "'by_duration:<PnDTnHnMn.nS.>'.",
            )
    return text


def _canonical(d: ConfigDef, raw: str) -> str:
    """A stored value as Kafka's ConfigDef.convertToString shows it."""
    value = _parse(d, raw)
    return str(value).lower() if isinstance(value, bool) else str(value)


def validate(props: Mapping[str, str], settings: BrokerGroupSettings) -> None:
    """Kafka's ``GroupConfig.validate`` of a group's whole set of overrides; raises
    ``GroupConfigError``."""
    for name in props:
        if name not in CONFIG_DEFS:
            raise GroupConfigError(f"Unknown group config name: {name}")
    values: dict[str, int | str | bool] = {}
    for name, d in CONFIG_DEFS.items():
        values[name] = _parse(d, props[name] if name in props else default_of(d, settings))
    for name, d in CONFIG_DEFS.items():
        if d.broker is None:
            continue
        _default, lo, hi = d.broker(settings)
        value = values[name]
        assert isinstance(value, int)
        if lo is not None and value < lo:
            raise GroupConfigError(f"{name} must be greater than or equal to {d.min_name}")
        if hi is not None and value > hi:
            raise GroupConfigError(f"{name} must be less than or equal to {d.max_name}")
    for session, heartbeat in _SESSION_ABOVE_HEARTBEAT:
        s, h = values[session], values[heartbeat]
        assert isinstance(s, int) and isinstance(h, int)
        if s <= h:
            raise GroupConfigError(f"{session} must be greater than {heartbeat}")


class GroupConfigs:
    """Every group's dynamic config overrides, and their effective values."""

    def __init__(self, settings: BrokerGroupSettings) -> None:
        self.settings = settings
        self._overrides: dict[str, dict[str, str]] = {}
        # told of every change (under --data-dir the share store writes it)
        self.on_change: Callable[[str, dict[str, str]], None] = lambda _g, _p: None

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def set_overrides(self, group_id: str, props: Mapping[str, str]) -> None:
        """Replace a group's overrides (already validated); an empty map forgets the group."""
        if props:
            self._overrides[group_id] = dict(props)
        else:
            self._overrides.pop(group_id, None)
        self.on_change(group_id, dict(props))

    def all_overrides(self) -> dict[str, dict[str, str]]:
        return {g: dict(p) for g, p in self._overrides.items()}

    def describe(self, group_id: str) -> list[tuple[str, str, str, bool]]:
        """(name, value, kind, set by the group) for every group config, as DescribeConfigs
        shows them: the group's value where it set one, the broker default otherwise."""
        props = self._overrides.get(group_id, {})
        out = []
        for name, d in CONFIG_DEFS.items():
            if name in props:
                out.append((name, _canonical(d, props[name]), d.kind, True))
            else:
                out.append((name, default_of(d, self.settings), d.kind, False))
        return out

    def int_value(self, group_id: str, name: str) -> int:
        """The effective value of an int config: the group's, clamped into the broker's
        current bounds (Kafka's ``GroupConfig.evaluate``), else the broker default."""
        d = CONFIG_DEFS[name]
        assert d.broker is not None
        default, lo, hi = d.broker(self.settings)
        raw = self._overrides.get(group_id, {}).get(name)
        if raw is None:
            return default
        value = int(raw.strip())
        if lo is not None:
            value = max(lo, value)
        if hi is not None:
            value = min(hi, value)
        return value

    def str_value(self, group_id: str, name: str) -> str:
        d = CONFIG_DEFS[name]
        raw = self._overrides.get(group_id, {}).get(name)
        return default_of(d, self.settings) if raw is None else raw.strip()

    def bool_value(self, group_id: str, name: str) -> bool:
        return self.str_value(group_id, name).lower() == "true"
