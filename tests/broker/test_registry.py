"""What ApiVersions advertises is exactly what is implemented."""

from kgroupd.broker.handlers import HANDLERS, supported_versions
from kgroupd.broker.handlers.api_versions import api_versions_body
from kgroupd.broker.handlers.registry import HOMES
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.messages import MESSAGES, lookup
from kgroupd.protocol.schemas import DEFINITIONS, SERVED


def test_advertised_table_is_the_handler_registry_and_the_served_schemas() -> None:
    table = {k: (lo, hi) for k, lo, hi in supported_versions()}
    # Every handler serves exactly the table's range, with our definitions for each version.
    assert table == {k: SERVED[k] for k in table}
    assert set(SERVED) == {k for k, _ in MESSAGES}
    # Every served API is defined; DEFINITIONS may run ahead of SERVED (APIs defined before
    # their handlers exist), and those are neither advertised nor in the registry.
    assert set(SERVED) <= set(DEFINITIONS)
    # Every API of the table has its handler.
    assert set(SERVED) == set(table)


def test_apis_defined_ahead_of_their_handlers_are_not_served() -> None:
    ahead = set(DEFINITIONS) - set(SERVED)
    # WriteTxnMarkers: broker-to-broker; share-group APIs defined before their handlers (issue 25)
    assert 27 in ahead
    assert ahead <= {27, 77, 90, 91, 92}
    for key in ahead:
        assert key not in HANDLERS
        assert all(lookup(key, v) is None for v in range(0, 8))


def test_every_advertised_version_has_a_message_definition_and_no_holes() -> None:
    for entry in HANDLERS.values():
        for v in range(entry.min_version, entry.max_version + 1):
            assert lookup(entry.api_key, v) is not None, (entry.api_key, v)
    for key, version in MESSAGES:  # and no definition serves a version we do not advertise
        if key in HANDLERS:
            assert HANDLERS[key].min_version <= version <= HANDLERS[key].max_version


def test_api_versions_body_lists_the_registry() -> None:
    body = api_versions_body(ErrorCode.NONE)
    listed = [(e["api_key"], e["min_version"], e["max_version"]) for e in body["api_keys"]]
    assert listed == supported_versions()
    # Every API a consumer group needs, and the core of issue 2.
    keys = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 22, 32, 37, 42, 47, 68, 69)
    for key in keys:
        assert key in {k for k, _, _ in listed}


def test_api_versions_advertises_group_transaction_and_share_versions() -> None:
    body = api_versions_body(ErrorCode.NONE)
    assert body["supported_features"] == [
        {"name": "group.version", "min_version": 0, "max_version": 1},
        {"name": "transaction.version", "min_version": 0, "max_version": 2},
        {"name": "share.version", "min_version": 0, "max_version": 1},
    ]
    assert body["finalized_features"] == [
        {"name": "group.version", "max_version_level": 1, "min_version_level": 1},
        {"name": "transaction.version", "max_version_level": 2, "min_version_level": 2},
        {"name": "share.version", "max_version_level": 1, "min_version_level": 1},
    ]
    assert body["finalized_features_epoch"] >= 0
    # --transaction-version 1: finalized at 1 (clients use AddPartitionsToTxn, EndTxn < v5)
    older = api_versions_body(ErrorCode.NONE, transaction_version=1)
    assert older["finalized_features"][1] == {
        "name": "transaction.version",
        "max_version_level": 1,
        "min_version_level": 1,
    }


def test_each_api_is_handled_in_the_module_the_lazy_table_names() -> None:
    """A handler module is imported when its API's first request arrives: ``HOMES`` must
    name, for every API, the module that registers its handler (and nothing else)."""
    assert set(HOMES) == set(HANDLERS)
    for key, entry in HANDLERS.items():
        assert entry.fn.__module__ == f"kgroupd.broker.handlers.{HOMES[key]}", key
