"""``kgroupd``: run the broker (``python -m kgroupd.broker`` is the same); ``kgroupd groups ...``
and
``kgroupd topics ...`` are the admin tools (``kgroupd.broker.cli.tools``)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from kgroupd.broker.config.logging import configure_logging
from kgroupd.broker.config.settings import BrokerConfig, ConfigError, load_config


class ShutdownError(Exception):
    """The broker could not stop cleanly (its last writes failed)."""


async def serve(config: BrokerConfig) -> None:
    from kgroupd.broker.net.server import KafkaServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before start-up, so a signal sent as soon as "listening" is logged is handled.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = KafkaServer(config)
    await server.start()
    await stop.wait()
    try:
        await server.stop()
    except OSError as exc:
        # e.g. a full disk: the final snapshot or records not yet written cannot be written
        raise ShutdownError(
            f"stopping: cannot write to the data dir {config.data_dir}: "
            f"{exc.strerror or exc}; everything acknowledged was on disk already, "
            "anything not acknowledged may be lost"
        ) from exc


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (it is a dependency except on Windows)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        asyncio.run(coro)
        return
    uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    # the admin tools, never on the serving path
    if args[:1] in (["groups"], ["share-groups"], ["topics"]):
        from kgroupd.broker.cli.tools import main as admin_main

        return admin_main(args)
    if "-h" in args or "--help" in args:
        from kgroupd.broker.cli.tools import TOOLS_HELP

        print(TOOLS_HELP)
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log_format, config.log_level)
    from kgroupd.broker.security.credentials import SecuritySetupError
    from kgroupd.broker.storage.datadir import DataDirError
    from kgroupd.broker.storage.entries import StorageError

    try:
        run(serve(config))
    except (DataDirError, StorageError, SecuritySetupError) as exc:
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 2
    except ShutdownError as exc:
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
