"""KIP-848 consumer groups against the classic protocol, on the same kgroupd, in one run.

    python bench/bench_consumer_groups.py [--only CASE,...] [--members 100,1000]

CASE is ``join``, ``heartbeat`` or ``versions`` (default: all three).

* join: N members (one connection each, simulated in this process, speaking the wire
  protocol) form a Stable group over a topic of 2N partitions; then one member joins. Time
  from its first request until every member is stable at the new epoch (consumer protocol:
  each member's epoch is the group's new epoch, every partition owned exactly once; classic:
  every member has its SyncGroup answer of the new generation). Members heartbeat every
  ``--interval-ms`` in both protocols (the broker's ``--group-consumer-heartbeat-interval-ms``
  is set to it); a consumer member that gets a new assignment acknowledges it at once, as
  the Java client does; a classic member that hears REBALANCE_IN_PROGRESS rejoins at once
  and the leader assigns ranges. Median of ``--rounds`` rounds. Goal: the consumer protocol
  faster than classic at 1,000 members.
* heartbeat: a Stable group of ``--hb-members`` members, each pipelining ``--window``
  heartbeats on its own connection for ``--seconds``: ConsumerGroupHeartbeat v1/s against
  classic Heartbeat v4/s. Goal: at least 80% of classic.
* versions: Heartbeat v4 against v3, and simple OffsetCommit (8 partitions) v10 against v7,
  pipelined as above. Goal: the newest no more than 10% slower.

Every answer is checked, so a broker that refuses work cannot look fast. Figures go to
BENCHMARKS.md with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import struct
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _harness as h

from kgroupd.protocol.messages import MessageSpec, lookup

_SIZE = struct.Struct(">i")
_HDR = struct.Struct(">hhih")
CLIENT = b"bench"
CASES = ("join", "heartbeat", "versions")
REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 27, 79


class Failure(Exception):
    pass


def frame(api_key: int, version: int, corr: int, body: dict[str, Any]) -> bytes:
    spec = _spec(api_key, version)
    header = _HDR.pack(api_key, version, corr, len(CLIENT)) + CLIENT
    if spec.flexible:
        header += b"\x00"
    payload = header + spec.encode_request(body)
    return _SIZE.pack(len(payload)) + payload


def _spec(api_key: int, version: int) -> MessageSpec:
    spec = lookup(api_key, version)
    if spec is None:
        raise Failure(f"api {api_key} v{version} has no definition here")
    return spec


class Client(asyncio.Protocol):
    """One connection: ``call`` sends a request and resolves with the decoded answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.corr = itertools.count(1)
        self.pending: dict[int, tuple[MessageSpec, asyncio.Future[dict[str, Any]]]] = {}
        self.on_raw: Callable[[bytes], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        for _, fut in self.pending.values():
            if not fut.done():
                fut.set_exception(Failure(f"connection lost: {exc}"))

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> asyncio.Future[Any]:
        corr = next(self.corr)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[corr] = (_spec(api_key, version), fut)
        assert self.transport is not None
        self.transport.write(frame(api_key, version, corr, body))
        return fut

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            body = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            if self.on_raw is not None:
                self.on_raw(body)
                continue
            (corr,) = _SIZE.unpack_from(body, 0)
            spec, fut = self.pending.pop(corr)
            offset = 5 if spec.response_header_v1 else 4  # empty header tags: one byte
            if not fut.done():  # a round may end with requests in flight
                fut.set_result(spec.decode_response(body, offset))
        del buf[:pos]


async def connect(port: int, n: int) -> list[Client]:
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(64)

    async def one() -> Client:
        async with sem:
            _, proto = await loop.create_connection(Client, "127.0.0.1", port)
            return proto

    return list(await asyncio.gather(*(one() for _ in range(n))))


# --- the consumer protocol (KIP-848) ---------------------------------------------------


class ConsumerMember:
    def __init__(self, client: Client, group: str, topic: str, interval_s: float) -> None:
        self.client = client
        self.group = group
        self.topic = topic
        self.interval_s = interval_s
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.send_owned = True
        self.joined = False
        self.wake = asyncio.Event()
        self.changed: Callable[[], None] = lambda: None

    def _request(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
        }
        if not self.joined:
            body |= {"rebalance_timeout_ms": 30000, "subscribed_topic_names": [self.topic]}
        if self.send_owned:
            body["topic_partitions"] = [
                {"topic_id": t, "partitions": sorted(p)} for t, p in self.owned.items()
            ]
        return body

    async def heartbeat(self) -> None:
        owned_sent = self.send_owned
        resp = await self.client.call(68, 1, self._request())
        if resp["error_code"]:
            raise Failure(f"ConsumerGroupHeartbeat: {resp['error_code']} {resp['error_message']}")
        self.joined = True
        if owned_sent:
            self.send_owned = False
        self.epoch = resp["member_epoch"]
        assignment = resp["assignment"]
        if assignment is not None:
            new = {
                tp["topic_id"]: frozenset(tp["partitions"])
                for tp in assignment["topic_partitions"]
                if tp["partitions"]
            }
            if new != self.owned:
                self.owned = new
                self.send_owned = True
                self.wake.set()  # acknowledge at once
        self.changed()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.heartbeat()
            if self.wake.is_set():
                self.wake.clear()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.interval_s)
            self.wake.clear()

    async def leave(self) -> None:
        self.epoch = -1
        await self.client.call(68, 1, self._request())


# --- the classic protocol -----------------------------------------------------------------


def _subscription(topic: str) -> bytes:
    raw = topic.encode()
    return struct.pack(">hih", 0, 1, len(raw)) + raw + struct.pack(">i", -1)


def _assignment(topic: str, parts: list[int]) -> bytes:
    raw = topic.encode()
    head = struct.pack(">hih", 0, 1, len(raw)) + raw + struct.pack(">i", len(parts))
    return head + b"".join(struct.pack(">i", p) for p in parts) + struct.pack(">i", -1)


class ClassicMember:
    def __init__(
        self, client: Client, group: str, topic: str, partitions: int, interval_s: float
    ) -> None:
        self.client = client
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self.interval_s = interval_s
        self.member_id = ""
        self.generation = -1
        self.synced = -1
        self.changed: Callable[[], None] = lambda: None

    async def join(self) -> None:
        while True:
            resp = await self.client.call(
                11,
                5,
                {
                    "group_id": self.group,
                    "session_timeout_ms": 30000,
                    "rebalance_timeout_ms": 30000,
                    "member_id": self.member_id,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": _subscription(self.topic)}],
                },
            )
            if resp["error_code"] == MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]
                continue
            if resp["error_code"]:
                raise Failure(f"JoinGroup: {resp['error_code']}")
            break
        self.member_id = resp["member_id"]
        self.generation = resp["generation_id"]
        assignments = []
        if resp["leader"] == self.member_id:
            ids = sorted(m["member_id"] for m in resp["members"])
            per, extra = divmod(self.partitions, len(ids))
            start = 0
            for i, mid in enumerate(ids):
                n = per + (1 if i < extra else 0)
                parts = list(range(start, start + n))
                start += n
                assignments.append({"member_id": mid, "assignment": _assignment(self.topic, parts)})
        sync = await self.client.call(
            14,
            5,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": assignments,
            },
        )
        if sync["error_code"] == REBALANCE_IN_PROGRESS:
            await self.join()
            return
        if sync["error_code"]:
            raise Failure(f"SyncGroup: {sync['error_code']}")
        self.synced = self.generation
        self.changed()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            resp = await self.client.call(
                12,
                4,
                {
                    "group_id": self.group,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                },
            )
            if resp["error_code"] == REBALANCE_IN_PROGRESS:
                await self.join()
                continue
            if resp["error_code"]:
                raise Failure(f"Heartbeat: {resp['error_code']}")
            await asyncio.sleep(self.interval_s)


# --- cases --------------------------------------------------------------------------------


async def _until(done: Callable[[], bool], members: list[Any], timeout: float) -> None:
    event = asyncio.Event()

    def check() -> None:
        if done():
            event.set()

    for m in members:
        m.changed = check
    check()
    await asyncio.wait_for(event.wait(), timeout)


async def join_round(protocol: str, port: int, n: int, interval_s: float, rnd: int) -> float:
    topic = f"bench-cg-{protocol}-{n}-{rnd}"
    partitions = 2 * n
    h.create_topic(port, topic, partitions)
    h.wait_topic_ready(port, topic, partitions)
    group = f"{topic}-group"
    clients = await connect(port, n + 1)
    stop = asyncio.Event()
    members: list[Any]
    if protocol == "consumer":
        members = [ConsumerMember(c, group, topic, interval_s) for c in clients]
    else:
        members = [ClassicMember(c, group, topic, partitions, interval_s) for c in clients]
    first, joiner = members[:-1], members[-1]
    tasks: list[asyncio.Task[None]] = []
    try:
        if protocol == "consumer":
            tasks = [asyncio.create_task(m.run(stop)) for m in first]
            await _until(lambda: _consumer_stable(first, partitions), first, 120)
            t0 = time.perf_counter()
            tasks.append(asyncio.create_task(joiner.run(stop)))
            await _until(lambda: _consumer_stable(members, partitions), members, 120)
        else:
            await asyncio.gather(*(m.join() for m in first))
            tasks = [asyncio.create_task(m.run(stop)) for m in first]
            await _until(lambda: len({m.synced for m in first}) == 1, first, 120)
            before = first[0].synced
            t0 = time.perf_counter()
            tasks.append(asyncio.create_task(_join_then_run(joiner, stop)))
            await _until(
                lambda: (
                    all(m.synced > before for m in members)
                    and len({m.synced for m in members}) == 1
                ),
                members,
                120,
            )
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            if c.transport is not None:
                c.transport.close()
    h.delete_topic(port, topic)
    return elapsed


async def _join_then_run(member: ClassicMember, stop: asyncio.Event) -> None:
    await member.join()
    await member.run(stop)


def _consumer_stable(members: list[ConsumerMember], partitions: int) -> bool:
    epochs = {m.epoch for m in members}
    if len(epochs) != 1 or 0 in epochs:
        return False
    seen = 0
    owned: set[tuple[uuid.UUID, int]] = set()
    for m in members:
        for t, parts in m.owned.items():
            seen += len(parts)
            owned.update((t, p) for p in parts)
    return seen == len(owned) == partitions


async def pipelined(
    port: int, frames: list[bytes], check: Callable[[bytes], None], args: Any
) -> float:
    """Answers per second with ``args.window`` requests in flight per connection."""
    clients = await connect(port, len(frames))
    count = 0
    counting = False
    for client, data in zip(clients, frames, strict=True):

        def on_raw(body: bytes, client: Client = client, data: bytes = data) -> None:
            nonlocal count
            check(body)
            if counting:
                count += 1
            assert client.transport is not None
            client.transport.write(data)

        client.on_raw = on_raw
        assert client.transport is not None
        client.transport.write(data * args.window)
    await asyncio.sleep(0.5)  # warm-up
    counting = True
    t0 = time.perf_counter()
    await asyncio.sleep(args.seconds)
    counting = False
    rate = count / (time.perf_counter() - t0)
    for c in clients:
        c.on_raw = lambda _b: None
        if c.transport is not None:
            c.transport.close()
    return rate


def _error_at(offset: int) -> Callable[[bytes], None]:
    def check(body: bytes) -> None:
        (code,) = struct.unpack_from(">h", body, offset)
        if code:
            raise Failure(f"error {code}")

    return check


async def heartbeat_rates(port: int, args: Any) -> dict[str, float]:
    topic = "bench-cg-hb"
    h.create_topic(port, topic, 2 * args.hb_members)
    out: dict[str, float] = {}
    # consumer protocol: a stable group, then each member pipelines its steady heartbeat
    clients = await connect(port, args.hb_members)
    stop = asyncio.Event()
    members = [ConsumerMember(c, "bench-cg-hb-c", topic, 0.05) for c in clients]
    tasks = [asyncio.create_task(m.run(stop)) for m in members]
    await _until(lambda: _consumer_stable(members, 2 * args.hb_members), members, 60)
    stop.set()
    await asyncio.gather(*tasks)
    steady = [
        frame(68, 1, 7, {"group_id": m.group, "member_id": m.member_id, "member_epoch": m.epoch})
        for m in members
    ]
    out["ConsumerGroupHeartbeat v1"] = await pipelined(port, steady, _error_at(4 + 1 + 4), args)
    # classic: a stable group, then each member pipelines Heartbeat v4
    clients = await connect(port, args.hb_members)
    classic = [ClassicMember(c, "bench-cg-hb-k", topic, 2 * args.hb_members, 1.0) for c in clients]
    await asyncio.gather(*(m.join() for m in classic))
    while len({m.synced for m in classic}) != 1:
        await asyncio.gather(*(m.join() for m in classic))
    for version, label in ((4, "Heartbeat v4"), (3, "Heartbeat v3")):
        frames = [
            frame(
                12,
                version,
                7,
                {"group_id": m.group, "generation_id": m.generation, "member_id": m.member_id},
            )
            for m in classic
        ]
        offset = 4 + (1 if version >= 4 else 0) + 4
        out[label] = await pipelined(port, frames, _error_at(offset), args)
    return out


async def commit_rates(port: int, args: Any) -> dict[str, float]:
    topic = "bench-cg-commit"
    h.create_topic(port, topic, 8)
    meta = h.call(port, 3, 12, {"topics": [{"name": topic}]})
    topic_id = meta["topics"][0]["topic_id"]
    out: dict[str, float] = {}
    for version in (10, 7):
        frames = []
        for i in range(args.hb_members):
            t: dict[str, Any] = {"name": topic, "topic_id": topic_id}
            t["partitions"] = [
                {"partition_index": p, "committed_offset": 100 + p, "committed_metadata": ""}
                for p in range(8)
            ]
            body = {
                "group_id": f"bench-cg-commit-{version}-{i}",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "topics": [t],
            }
            frames.append(frame(8, version, 7, body))
        out[f"OffsetCommit v{version}"] = await pipelined(port, frames, lambda _b: None, args)
    return out


async def main_async(args: argparse.Namespace) -> None:
    interval = args.interval_ms
    extra = [
        "--initial-rebalance-delay-ms",
        "0",
        "--group-consumer-min-heartbeat-interval-ms",
        str(min(interval, 5000)),
        "--group-consumer-heartbeat-interval-ms",
        str(interval),
        "--group-consumer-min-session-timeout-ms",
        "10000",
        "--group-consumer-session-timeout-ms",
        "30000",
    ]
    broker = h.BrokerProcess("kgroupd", extra=extra).start()
    print(f"# {h.stamp()} {h.machine()} kgroupd {h.kgroupd_revision()}")
    print(f"# {h.command_line()}")
    try:
        if "join" in args.only:
            print(f"\n## join: one member joins N stable members ({interval} ms heartbeats)")
            print("| members | consumer (ms, median) | classic (ms, median) | classic / consumer |")
            print("|---|---|---|---|")
            for n in args.members:
                times: dict[str, list[float]] = {"consumer": [], "classic": []}
                for rnd in range(args.rounds):
                    for protocol in ("consumer", "classic"):
                        elapsed = await join_round(protocol, broker.port, n, interval / 1000, rnd)
                        times[protocol].append(elapsed * 1000)
                c = h.median(times["consumer"])
                k = h.median(times["classic"])
                print(f"| {n} | {c:.0f} | {k:.0f} | {k / c:.2f} |  (load {os.getloadavg()[0]:.1f})")
        if "heartbeat" in args.only or "versions" in args.only:
            rates = await heartbeat_rates(broker.port, args)
            rates |= await commit_rates(broker.port, args)
            print(f"\n## pipelined ({args.hb_members} connections x {args.window} in flight)")
            print("| request | answers/s |")
            print("|---|---|")
            for name, rate in rates.items():
                print(f"| {name} | {rate:,.0f} |")
            for a, b in (
                ("ConsumerGroupHeartbeat v1", "Heartbeat v4"),
                ("Heartbeat v4", "Heartbeat v3"),
                ("OffsetCommit v10", "OffsetCommit v7"),
            ):
                print(f"{a} / {b}: {rates[a] / rates[b]:.2f}")
    finally:
        broker.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--members", default="100,1000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval-ms", type=int, default=500)
    ap.add_argument("--hb-members", type=int, default=10)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    args.only = set(args.only.split(","))
    args.members = [int(x) for x in args.members.split(",")]
    h.uvloop_run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
