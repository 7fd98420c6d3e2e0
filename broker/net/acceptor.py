"""A listener that stops accepting while the broker holds ``--max-connections`` (Kafka's
``max.connections``): new connections wait in the kernel's backlog until one closes, as
Kafka's acceptor blocks. Used only when the limit is set; otherwise listeners are the event
loop's own servers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Sized

BACKLOG = 1024
POLL_S = 0.01  # how often a full broker looks for a freed slot


class Acceptor:
    """Quacks like the ``asyncio.Server`` it replaces: ``sockets``, ``close``,
    ``wait_closed``."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        connections: Sized,
        limit: int,
    ) -> None:
        self.sockets = [sock]
        self._factory = factory
        self._connections = connections
        self._limit = limit
        self._task = asyncio.create_task(self._run())

    @classmethod
    async def bind(
        cls,
        host: str | None,
        port: int,
        factory: Callable[[], asyncio.BaseProtocol],
        connections: Sized,
        limit: int,
    ) -> Acceptor:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _name, address = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return cls(sock, factory, connections, limit)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        sock = self.sockets[0]
        while True:
            while len(self._connections) >= self._limit:
                await asyncio.sleep(POLL_S)
            conn, _peer = await loop.sock_accept(sock)
            try:
                await loop.connect_accepted_socket(self._factory, conn)
            except OSError:
                conn.close()  # the peer went away before the transport was made

    def close(self) -> None:
        self._task.cancel()
        self.sockets[0].close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
