"""The floor of bench_startup.py: a bare asyncio server, spawned as kgroupd is.

    python bench/_bare_server.py PORT

Binds 127.0.0.1:PORT with ``asyncio.start_server`` and answers every request frame with an
empty one (size 0) until killed: nothing but the interpreter, asyncio and one listener.
"""

import asyncio
import sys


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(size)
            writer.write(b"\0\0\0\0")
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
