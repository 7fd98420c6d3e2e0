"""``kgroupd``: run the broker (``python -m kgroupd.broker`` is the same); ``kgroupd groups
...`` and ``kgroupd topics ...`` are the admin tools (``kgroupd.broker.cli.tools``)."""

from __future__ import annotations

import sys

# Only what reading the flags needs is imported up front: ``kgroupd --version`` imports
# nothing else (not even typing), ``--help`` no asyncio, and a broker what its settings use
# (SASL, TLS and the HTTP listener only when configured; kgroupd.broker.net.server).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Coroutine, Sequence
    from typing import Any

    from kgroupd.broker.config.settings import BrokerConfig


class ShutdownError(Exception):
    """The broker could not stop cleanly (its last writes failed)."""


async def serve(config: BrokerConfig, sockets: dict[str, socket.socket] | None = None) -> None:
    import asyncio
    import signal

    from kgroupd.broker.net.server import KafkaServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Before start-up, so a signal sent as soon as "listening" is logged is handled.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = KafkaServer(config, sockets)
    await server.start()
    _tune_gc()
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


def _tune_gc() -> None:
    """Start-up's objects live as long as the broker: out of the cyclic collector's scans
    (``gc.freeze``), and collections rarer (each commit keeps a few tuples alive a while, and
    every full collection walked the whole heap: ~20% of an OffsetCommit's CPU, issue 26).
    What refcounting frees, the great majority, is freed at once as before."""
    import gc

    gc.freeze()
    gc.set_threshold(10_000, 50, 50)


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop when it is installed (it is a dependency except on Windows)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        import asyncio

        asyncio.run(coro)
        return
    uvloop.run(coro)


# What a shell reports for a Unix tool stopped by SIGPIPE (128 + 13)
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code. When the reader of stdout goes away (``kgroupd topics list | head -1``)
    the command stops quietly, as Unix tools do: no traceback, exit code 141."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # what is still buffered may meet the closed pipe only now
    except BrokenPipeError:
        import os

        # Python would try to flush stdout again at exit and print that it failed
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    # the admin tools, never on the serving path
    if args[:1] in (["groups"], ["share-groups"], ["topics"]):
        from kgroupd.broker.cli.tools import main as admin_main

        return admin_main(args)
    if args == ["--version"]:  # what argparse's --version prints, without building it
        from kgroupd.broker.config.version import version

        print(f"kgroupd {version()}")
        return 0
    if "-h" in args or "--help" in args:
        from kgroupd.broker.cli.tools import TOOLS_HELP

        print(TOOLS_HELP)
        if args in (["-h"], ["--help"]):  # argparse's text, cached for the usual width
            from kgroupd.broker.cli.help_text import cached_help

            text = cached_help()
            if text is not None:
                sys.stdout.write(text)
                return 0
    from kgroupd.broker.config.settings import ConfigError, load_config

    try:
        config = load_config(args)
    except ConfigError as exc:
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 2
    try:
        sockets = listen_early(config)
    except OSError as exc:  # what the server says when it cannot bind (ListenerBindError)
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return 1
    from kgroupd.broker.config.logging import configure_logging

    configure_logging(config.log_format, config.log_level)
    try:
        run(serve(config, sockets))
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        print(f"kgroupd: error: {exc}", file=sys.stderr)
        return code
    finally:
        for sock in sockets.values():
            sock.close()  # a no-op for those the server closed
    return 0


def listen_early(config: BrokerConfig) -> dict[str, socket.socket]:
    """The Kafka listeners' sockets, bound and listening before the server's modules are
    imported (and, with --data-dir, before the load): the kernel accepts connections into the
    backlog from now on, and the broker answers them once it serves, where a client would
    otherwise be refused and back off. Bound as asyncio binds (SO_REUSEADDR, IPv6 only on an
    IPv6 socket); a host with several addresses ("" = every interface) is left to the server,
    which binds one socket per address. An OSError says which listener, as the server's."""
    import socket

    out: dict[str, socket.socket] = {}
    listener = None
    try:
        for listener in config.listener_list():
            infos = socket.getaddrinfo(
                listener.host or None,
                listener.port,
                type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE,
            )
            if len({info[4] for info in infos}) != 1:
                continue
            family, kind, proto, _name, address = infos[0]
            sock = socket.socket(family, kind, proto)
            out[listener.name] = sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in out.values():
            sock.close()
        name = listener.name if listener is not None else "?"
        raise OSError(f"cannot listen on {name} {exc}") from None
    return out


BACKLOG = 1024  # as kgroupd.broker.net.server's (not imported yet)


def _exit_code(exc: Exception) -> int | None:
    """2 for settings that cannot be used (the data dir, TLS files, users), 1 for what failed
    while running (a port taken, a disk full), None for a bug (raised as it is)."""
    # imported here: the storage modules would be imported for nothing by a run in memory
    from kgroupd.broker.security.credentials import SecuritySetupError
    from kgroupd.broker.storage.datadir import DataDirError
    from kgroupd.broker.storage.entries import StorageError

    if isinstance(exc, (DataDirError, StorageError, SecuritySetupError)):
        return 2
    if isinstance(exc, (ShutdownError, OSError)):
        return 1
    return None


if __name__ == "__main__":
    sys.exit(main())
