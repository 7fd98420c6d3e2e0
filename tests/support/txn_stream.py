"""A transactional producer that runs until killed, for the broker crash test; a subprocess so
the test process never holds a producer whose broker vanished.

    python -m tests.support.txn_stream BOOTSTRAP TOPIC PARTITIONS TXN_ID

Transaction n writes ``t<n>-<p>`` to each partition p; every third (n % 3 == 2) is aborted.
After each transaction ends it prints ``committed n`` or ``aborted n`` (only once the broker
has answered EndTxn). Errors are printed and the process exits 1.
"""

from __future__ import annotations

import asyncio
import sys

from aiokafka import AIOKafkaProducer


class _Abort(Exception):
    pass


async def stream(bootstrap: str, topic: str, partitions: int, txn_id: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=3000
    )
    await producer.start()
    n = 0
    while True:
        try:
            async with producer.transaction():
                for p in range(partitions):
                    await producer.send(topic, f"t{n}-{p}".encode(), partition=p)
                if n % 3 == 2:
                    raise _Abort
        except _Abort:
            print(f"aborted {n}", flush=True)
        else:
            print(f"committed {n}", flush=True)
        n += 1


def main(argv: list[str]) -> None:
    bootstrap, topic, partitions, txn_id = argv
    asyncio.run(stream(bootstrap, topic, int(partitions), txn_id))


if __name__ == "__main__":
    main(sys.argv[1:])
