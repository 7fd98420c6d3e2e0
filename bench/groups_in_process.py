"""``bench_groups.py --in-process``: the broker's own cost per request, without sockets or a
client (a KafkaServer driven in this process, as profile_hotpath.py does)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _harness as h
from groups_cases import load
from groups_pipes import COMMIT_PARTITIONS
from groups_wire import (
    _SIZE,
    TOPIC,
    Failure,
    assignment,
    commit_frame,
    generation_at,
    heartbeat_frame,
    join_frame,
    parse_join,
    subscription,
    sync_error,
    sync_frame,
    with_generation,
)


def in_process_main(args: argparse.Namespace) -> None:
    """``--in-process``: a real KafkaServer and KafkaConnections driven through their
    ``asyncio.Protocol`` callbacks with fake transports (as profile_hotpath.py does), the
    same frames as the socket cases; prints this process's CPU time (the broker's: nothing
    else runs in it while timed, and it does not wait on I/O) per request or per rebalance
    round, which background load does not inflate as it does wall time; optionally under
    py-spy."""
    from kgroupd.broker.config.logging import configure_logging

    configure_logging("json", "warning")
    print(f"# {h.kgroupd_revision()}; load avg {load():.2f}")
    h.uvloop_run(in_process_async(args))


def _transport_class() -> Any:
    import profile_hotpath as ph

    class Capture(ph.FakeTransport):
        """Counts like profile_hotpath's fake transport; keeps the bytes when ``keep``."""

        def __init__(self, protocol: Any) -> None:
            super().__init__(protocol)
            self.keep = True
            self.data = bytearray()

        def write(self, data: bytes) -> None:
            self.bytes_out += len(data)
            if self.keep:
                self.data += data

        def writelines(self, parts: Any) -> None:
            for p in parts:
                self.write(p)

        def answers(self) -> list[bytes]:
            out = []
            buf = self.data
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = _SIZE.unpack_from(buf, pos)
                out.append(bytes(buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            del buf[:pos]
            return out

    return Capture


async def _answers(transports: Sequence[Any], want: int, timeout: float = 30.0) -> list[bytes]:
    """Yield to the loop until every transport holds ``want`` answers; the first of each."""
    got: list[list[bytes]] = [[] for _ in transports]
    deadline = time.monotonic() + timeout
    while True:
        for i, t in enumerate(transports):
            got[i] += t.answers()
        if all(len(g) >= want for g in got):
            return [g[0] for g in got]
        if time.monotonic() > deadline:
            raise Failure(f"in-process: answers missing ({[len(g) for g in got]})")
        await asyncio.sleep(0)


async def in_process_async(args: argparse.Namespace) -> None:
    import dataclasses

    import profile_hotpath as ph

    from kgroupd.broker.config.settings import BrokerConfig, TopicSpec
    from kgroupd.broker.net.connection import KafkaConnection
    from kgroupd.broker.net.server import KafkaServer

    capture = _transport_class()
    config = dataclasses.replace(
        BrokerConfig(),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        initial_rebalance_delay_ms=0,
        # commits name a topic that exists (unknown ones are refused, as Kafka refuses them)
        create_topics=(TopicSpec("bench-commits", 64),),
    )
    if args.no_metrics:  # (a field older trees, run with --kgroupd-rev, do not have)
        config = dataclasses.replace(config, metrics=False)
    server = KafkaServer(config)
    await server.start()

    def connect() -> tuple[Any, Any]:
        conn = KafkaConnection(server)
        t = capture(conn)
        conn.connection_made(t)
        return conn, t

    async def group(name: str, size: int) -> tuple[list[Any], list[Any], list[str], int, str]:
        conns = [connect() for _ in range(size)]
        meta = subscription(TOPIC, b"")
        for c, _t in conns:
            c.data_received(join_frame(name, "", meta, args.session_ms))
        joins = [parse_join(a, True) for a in await _answers([t for _c, t in conns], 1)]
        if any(a.error for a in joins) or len({a.generation for a in joins}) != 1:
            raise Failure(f"in-process join: {joins[:3]}")
        leader = joins[0].leader
        ids = next(a.member_ids for a in joins if a.member_id == leader)
        gen = joins[0].generation
        for (c, _t), a in zip(conns, joins, strict=True):
            assigned = [(m, assignment(TOPIC, [i])) for i, m in enumerate(ids)]
            c.data_received(
                sync_frame(name, gen, a.member_id, assigned if a.member_id == leader else ())
            )
        syncs = await _answers([t for _c, t in conns], 1)
        if any(sync_error(b) for b in syncs):
            raise Failure("in-process sync failed")
        return (
            [c for c, _t in conns],
            [t for _c, t in conns],
            [a.member_id for a in joins],
            gen,
            leader,
        )

    def timed(label: str, run: Callable[[], Any], count: int, unit: str) -> Any:
        return label, run, count, unit

    spy_out = Path(args.py_spy) / "groups-in-process.txt" if args.py_spy else None
    if spy_out is not None:
        spy_out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for case in args.in_process.split(","):
            if case.startswith("commit"):
                parts = int(case.split("-")[1]) if "-" in case else COMMIT_PARTITIONS
                conn, t = connect()
                frames = [
                    commit_frame("inproc", "bench-commits", parts, k * 1000) for k in range(16)
                ]
                blob = b"".join(frames)
                conn.data_received(blob)
                for a in t.answers():
                    resp = h.decode_response(8, 2, a)
                    if any(p["error_code"] for t in resp["topics"] for p in t["partitions"]):
                        raise Failure(f"in-process commit: {resp['topics']}")
                t.keep = False
                n = args.in_process_requests
                spy = ph.start_py_spy(str(spy_out)) if spy_out else None
                t0 = time.process_time()
                for _ in range(n // 16):
                    conn.data_received(blob)
                elapsed = time.process_time() - t0
                ph.stop_py_spy(spy)
                results.append(
                    (
                        f"OffsetCommit v2, {parts} partitions",
                        elapsed / (n // 16 * 16) * 1e6,
                        "CPU-µs/request",
                    )
                )
            elif case == "heartbeat":
                conns, ts, ids, gen, _leader = await group("inproc-hb", 10)
                blobs = [b"".join([heartbeat_frame("inproc-hb", gen, m)] * 16) for m in ids]
                for c, b in zip(conns, blobs, strict=True):
                    c.data_received(b)
                for t in ts:
                    if any(sync_error(a) for a in t.answers()):
                        raise Failure("in-process heartbeat failed")
                    t.keep = False
                n = args.in_process_requests
                rounds = n // (16 * len(conns))
                spy = ph.start_py_spy(str(spy_out)) if spy_out else None
                t0 = time.process_time()
                for _ in range(rounds):
                    for c, b in zip(conns, blobs, strict=True):
                        c.data_received(b)
                elapsed = time.process_time() - t0
                ph.stop_py_spy(spy)
                results.append(
                    ("Heartbeat v1", elapsed / (rounds * 16 * len(conns)) * 1e6, "CPU-µs/request")
                )
            elif case.startswith("rebalance"):
                size = int(case.split("-")[1])
                name = f"inproc-rebalance-{size}"
                conns, ts, ids, gen, leader = await group(name, size)
                times = []
                spy = None
                assigned = [(m, assignment(TOPIC, [i])) for i, m in enumerate(ids)]
                syncs_out = [sync_frame(name, 0, m, assigned if m == leader else ()) for m in ids]
                at = generation_at(name)
                metas = [subscription(TOPIC, b"round-%d" % (r % 2)) for r in range(2)]
                rejoin_frames = [
                    [join_frame(name, m, meta, args.session_ms) for m in ids] for meta in metas
                ]
                for r in range(args.in_process_rounds + 1):
                    if r == 1 and spy_out:
                        spy = ph.start_py_spy(str(spy_out))
                    rejoins = rejoin_frames[r % 2]
                    t0 = time.process_time()
                    for c, f in zip(conns, rejoins, strict=True):
                        c.data_received(f)
                    joins = [parse_join(a, False) for a in await _answers(ts, 1)]
                    gen = joins[0].generation
                    for c, f in zip(conns, syncs_out, strict=True):
                        c.data_received(with_generation(f, at, gen))
                    syncs = await _answers(ts, 1)
                    secs = time.process_time() - t0
                    if any(a.error for a in joins) or any(sync_error(b) for b in syncs):
                        raise Failure("in-process rebalance failed")
                    if r:
                        times.append(secs)
                ph.stop_py_spy(spy)
                results.append(
                    (
                        f"rebalance round, {size} members",
                        h.median(times) * 1000,
                        "CPU-ms/round",
                    )
                )
            else:
                raise Failure(f"unknown in-process case {case!r}")
            if spy_out:
                print(f"{case}: py-spy ({spy_out})")
                print("\n".join(f"    {line}" for line in h.py_spy_summary(spy_out, top=30)))
    finally:
        await server.stop()
    for label, value, unit in results:
        print(f"| {label} | {value:.1f} {unit} |")
