"""Running an older revision of kgroupd in process (``--kgroupd-rev``): its code imports
``broker.x`` (before the one import name), and some of its modules had other names before
the layout of 2026-11-26. ``OldNames`` makes ``kgroupd.broker.x`` that revision's module,
so the benchmarks import one name whatever the revision.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import types
from typing import Any

# Modules the layout of 2026-11-26 moved: their name now -> the name in an older tree.
_MOVED = {
    "broker.cli.admin": "broker.admin.cli",
    "broker.cli.client": "broker.admin.client",
    "broker.cli.groups": "broker.admin.groups",
    "broker.cli.healthcheck": "broker.healthcheck",
    "broker.cli.kafka_ops": "broker.admin.kafka_ops",
    "broker.cli.main": "broker.cli",
    "broker.cli.output": "broker.admin.output",
    "broker.cli.properties": "broker.admin.properties",
    "broker.cli.tools": "broker.admin",
    "broker.cli.topics": "broker.admin.topics",
    "broker.config.cleaner": "broker.log.cleaner_options",
    "broker.config.groups": "broker.group_options",
    "broker.config.http": "broker.http_options",
    "broker.config.listeners": "broker.listeners",
    "broker.config.logging": "broker.logging",
    "broker.config.security": "broker.security.options",
    "broker.config.settings": "broker.config",
    "broker.config.storage": "broker.storage.options",
    "broker.config.types": "broker.option_types",
    "broker.http.api": "broker.http_api",
    "broker.http.listener": "broker.http",
    "broker.http.live": "broker.live",
    "broker.http.metrics": "broker.metrics",
    "broker.http.views": "broker.views",
    "broker.net.acceptor": "broker.acceptor",
    "broker.net.connection": "broker.connection",
    "broker.net.request_pool": "broker.request_pool",
    "broker.net.server": "broker.server",
    "broker.stats": "broker.metrics",
    "broker.storage.partition_store": "broker.storage.topic_store",
    "broker.testing.pytest_plugin": "broker.pytest_plugin",
    "protocol.api_names": "broker.api_names",
}
# Packages the layout made: in an older tree, the module of that name, or an empty package.
_NEW_PACKAGES = ("broker.net", "broker.http", "broker.config", "broker.cli", "broker.testing")


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """In a revision from before the one import name, ``kgroupd.broker.x`` is the module its
    own code imports as ``broker.x`` (under its older name where the layout moved it): one
    module under both names, never two copies."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.startswith("kgroupd.") and name.count(".") >= 1:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec: Any) -> Any:
        name = spec.name.removeprefix("kgroupd.")
        old = _MOVED.get(name, name)
        if name in _NEW_PACKAGES:
            try:
                module = importlib.import_module(old)
            except ModuleNotFoundError:
                module = types.ModuleType(old)
            if not hasattr(module, "__path__"):
                module.__path__ = []  # its submodules come through this finder too
            return module
        return importlib.import_module(old)

    def exec_module(self, module: Any) -> None:
        pass
