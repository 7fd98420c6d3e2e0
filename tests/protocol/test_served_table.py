"""The one table of served versions follows its rule, and ApiVersions answers exactly it.

Rule: for every API kgroupd serves, the newest version is Kafka 4.3's newest stable one (the
message JSON in kafka-clients-4.3.0.jar, less one where ``latestVersionUnstable``), and the
oldest is the lower of Kafka 4.3's oldest and the oldest kgroupd served before (Kafka 4
dropped old versions, KIP-896; kgroupd keeps them for older clients).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from kgroupd.broker.handlers import supported_versions
from kgroupd.protocol import schemas
from kgroupd.protocol.api_names import API_NAMES
from kgroupd.protocol.schemas import DEFINITIONS, HOMES, SERVED

from .kp_extra import jar_message_json

# The oldest version of each API kgroupd served before Kafka 4.3's ranges were adopted.
OLDEST_BEFORE = {0: 0, 1: 4, 2: 0, 3: 0, 8: 0, 9: 0, 10: 0, 11: 0, 12: 0, 13: 0, 14: 0}
OLDEST_BEFORE |= {15: 0, 16: 0, 18: 0, 19: 0, 20: 0, 22: 0, 32: 0, 37: 0, 42: 0, 47: 0}

NAMES = API_NAMES  # the package's table (the metrics' api label), checked here


def kafka_range(api_key: int) -> tuple[int, int]:
    spec = jar_message_json(NAMES[api_key] + "Request")
    assert spec["apiKey"] == api_key
    return _range(spec)


def _range(spec: dict[str, object]) -> tuple[int, int]:
    """The stable version range of one message JSON."""
    valid = spec["validVersions"]
    assert isinstance(valid, str)
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", valid)
    assert m is not None
    lo = int(m.group(1))
    hi = int(m.group(2) or lo)
    if spec.get("latestVersionUnstable"):
        hi -= 1
    return lo, hi


@pytest.mark.parametrize("api_key", sorted(SERVED))
def test_served_range_follows_the_rule(api_key: int) -> None:
    lo, hi = kafka_range(api_key)
    assert SERVED[api_key] == (min(lo, OLDEST_BEFORE.get(api_key, lo)), hi)


def test_each_api_is_defined_in_the_module_the_lazy_table_names() -> None:
    """A schema module is imported when one of its APIs is first used: ``HOMES`` must name,
    for every API, the module whose ``DEFINITIONS`` has it, and every module is named."""
    folder = Path(schemas.__file__).parent
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(set(HOMES.values())) == modules
    found = {
        key: name
        for name in modules
        for key in importlib.import_module(f"kgroupd.protocol.schemas.{name}").DEFINITIONS
    }
    assert found == HOMES


def test_every_served_api_is_listed() -> None:
    assert set(SERVED) == set(NAMES)


def test_api_versions_advertises_exactly_the_served_table() -> None:
    assert {k: (lo, hi) for k, lo, hi in supported_versions()} == SERVED


@pytest.mark.parametrize("api_key", sorted(set(DEFINITIONS) - set(SERVED)))
def test_apis_defined_ahead_of_serving_cover_kafka_stable_range(api_key: int) -> None:
    """A definition not served yet covers exactly Kafka 4.3's stable versions, so serving it
    later is one line in ``SERVED``."""
    req, resp = DEFINITIONS[api_key]
    lo, hi = _range(jar_message_json(req.name))  # latestVersionUnstable is the request's
    for msg in (req, resp):
        spec = jar_message_json(msg.name)
        assert spec["apiKey"] == api_key
        assert (msg.valid.lo, msg.valid.hi) == (lo, hi), msg.name
        flexible = str(spec["flexibleVersions"])
        assert (msg.flexible.lo, msg.flexible.hi) == (int(flexible.rstrip("+")), 32767)
