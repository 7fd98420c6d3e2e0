"""CRC-32C (Castagnoli), the checksum of record batches and of kgroupd's own files: the
``crc32c`` package's C function, loaded without that package's ``__init__``.

``import crc32c`` imports ``importlib.metadata`` and reads the installed distributions to set
``crc32c.__version__``, and imports ``argparse`` for its command line: longer than importing
the rest of the protocol package, at every start of every broker. The extension module
``crc32c._crc32c`` holds the function and needs none of that, so it is loaded on its own;
a ``crc32c`` laid out otherwise (a later release) is imported the ordinary way.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.machinery import ExtensionFileLoader, PathFinder
from typing import Any

__all__ = ["crc32c"]


def _load() -> Callable[[Any], int]:
    package = PathFinder.find_spec("crc32c")  # found, not run
    if package is not None and package.submodule_search_locations:
        spec = PathFinder.find_spec("crc32c._crc32c", list(package.submodule_search_locations))
        if spec is not None and isinstance(spec.loader, ExtensionFileLoader):
            module = spec.loader.create_module(spec)
            if module is not None:
                spec.loader.exec_module(module)
                function = getattr(module, "crc32c", None)
                if callable(function):
                    return function
    from crc32c import crc32c as ordinary

    return ordinary


crc32c: Callable[[Any], int] = _load()
