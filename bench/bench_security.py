"""What security costs: produce MB/s and Heartbeat/s over SSL and SASL_SSL against PLAINTEXT
on one kgroupd with the three listeners (``--only tls``), and Heartbeat/s and OffsetCommit/s with
``--authorizer acl`` against without (``--only acl``; two brokers).

    python bench/bench_security.py [--only tls|acl|abuse] [--rounds 5] [--requests 1500]

One kgroupd subprocess listens on PLAINTEXT, on SSL and on SASL_SSL (a certificate made with
``cryptography`` into ``.cache/bench-certs``; users from a ``--sasl-users`` file). Each
client connection on SSL or SASL_SSL does the TLS handshake (TLS 1.3, what Python's ``ssl``
and the broker negotiate), on SASL_SSL then SASL/SCRAM-SHA-512 (``scramp``), before the clock
starts; then (SSL / PLAINTEXT is what TLS alone costs):

- produce: ``--connections`` connections each send ``--requests`` pre-encoded ProduceRequest v7
  (acks=1) of one 16 KiB batch (15 records of 1 KiB) to their own partition of a fresh topic,
  ``--window`` in flight; every round checks the last offsets. MB/s counts batch bytes.
- heartbeats: ten connections, each the only member of its own group (JoinGroup and SyncGroup
  v3 first), pipeline ``--heartbeats`` Heartbeat v3 requests, ``--window`` in flight.

ACLs: the same heartbeats, and OffsetCommit v2 of 8 partitions (each connection its own
group), pipelined the same way, against a broker run with ``--authorizer acl
--allow-everyone-if-no-acl-found true`` (no ACL exists, so every decision is computed once
and then served from the connection's cache, the path every request takes) and against one
without an authorizer.

Hostile clients before authentication (``--only abuse``, issue 27): an authenticated
bystander on SASL_SSL asks Metadata back to back while an unauthenticated client sends one
SCRAM client-first token with a 4 MiB or a 50 MB user name, or guesses passwords (SCRAM-SHA-512,
PLAIN) back to back from one client, a new TLS connection per guess (each failure closes it),
for ``--guess-seconds``. Each scenario gets a fresh broker (one stalled by a token is killed
after ``--token-cap`` seconds). Figures: the bystander's round trip median / p99 / max, how
long the broker took to close (or answer) the token's connection, the broker's peak RSS, and
guesses/s; then, on a broker without the failure delay, the median answer time of a wrong
PLAIN password for a user who exists and for one who does not.

Rounds alternate which goes first; figures are medians; the ratios are SASL_SSL / PLAINTEXT
(goal: TLS costs under 30% of PLAINTEXT's produce throughput) and with / without ACLs (goal:
under 5% cost), of the rates and of the rates per broker CPU-second (on 2 cores the client,
which does its own TLS, competes with the broker, so the rate alone understates the broker).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _harness as h
import scramp
from _sasl_attack import MECHANISM, USER, guess, guesses, token_attack
from bench_throughput import Pipeline, build_batch, produce_frames

from tests.support.certs import Certs, make_certs

PASSWORD = "bench-secret"

LISTENERS = ("PLAINTEXT", "SASL_SSL")


@dataclass
class Endpoint:
    name: str
    port: int
    context: ssl.SSLContext | None


class Conn:
    """A request/response connection for the set-up (SASL, JoinGroup, SyncGroup), whose
    transport is then handed to a ``Pipeline`` for the timed part."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.corr = 1000

    @classmethod
    async def open(cls, ep: Endpoint) -> Conn:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            ep.port,
            ssl=ep.context,
            server_hostname="localhost" if ep.context else None,
        )
        conn = cls(reader, writer)
        if ep.name == "SASL_SSL":
            await conn.scram()
        return conn

    async def call(self, api_key: int, version: int, body: dict[str, object]) -> dict:
        self.corr += 1
        self.writer.write(h.request_frame(api_key, version, self.corr, body))
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return h.decode_response(api_key, version, await self.reader.readexactly(size))

    async def scram(self) -> None:
        if (await self.call(17, 1, {"mechanism": MECHANISM}))["error_code"] != 0:
            raise RuntimeError("SaslHandshake refused")
        client = scramp.ScramClient([MECHANISM], USER, PASSWORD)
        first = await self.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first["auth_bytes"].decode())
        final = await self.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
        if final["error_code"] != 0:
            raise RuntimeError(f"SCRAM failed: {final}")
        client.set_server_final(final["auth_bytes"].decode())

    def pipeline(self, frames: list[bytes], count: int, window: int) -> Pipeline:
        pipe = Pipeline(frames, count, window)
        transport = self.writer.transport
        transport.set_protocol(pipe)
        pipe.connection_made(transport)
        return pipe


async def timed(broker: h.BrokerProcess, pipes: list[Pipeline]) -> tuple[float, float]:
    """(seconds until every pipeline is answered, broker CPU share)."""
    b0 = h.cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    for p in pipes:
        p.go()
    await asyncio.wait_for(asyncio.gather(*(p.done for p in pipes)), 120)
    elapsed = time.perf_counter() - t0
    for p in pipes:
        assert p.transport is not None
        p.transport.close()
    return elapsed, (h.cpu_seconds(broker.pid) - b0) / elapsed


async def produce_round(
    broker: h.BrokerProcess, ep: Endpoint, rnd: int, args: argparse.Namespace
) -> tuple[float, float]:
    batch, rpb = build_batch(16 * 1024)
    topic = f"sec-{ep.name.lower()}-{rnd}"
    h.create_topic(broker.port, topic, args.connections)
    h.wait_topic_ready(broker.port, topic, args.connections)
    conns = [await Conn.open(ep) for _ in range(args.connections)]
    pipes = [
        c.pipeline(produce_frames(topic, i, batch, args.window * 2), args.requests, args.window)
        for i, c in enumerate(conns)
    ]
    elapsed, cpu = await timed(broker, pipes)
    for p in pipes:
        resp = h.decode_response(0, 7, p.kept["last"])
        part = resp["responses"][0]["partition_responses"][0]
        if part["error_code"] != 0 or part["base_offset"] != (args.requests - 1) * rpb:
            raise RuntimeError(f"{ep.name}: last produce answered {part}")
    h.delete_topic(broker.port, topic)
    return args.connections * args.requests * len(batch) / elapsed / h.MB, cpu


async def heartbeat_round(
    broker: h.BrokerProcess, ep: Endpoint, rnd: int, args: argparse.Namespace
) -> tuple[float, float]:
    pipes = []
    conns = []  # kept: a StreamWriter that is collected closes its transport
    for i in range(10):
        conn = await Conn.open(ep)
        conns.append(conn)
        group = f"hb-{ep.name.lower()}-{rnd}-{i}"
        join = await conn.call(
            11,
            3,
            {
                "group_id": group,
                "session_timeout_ms": 30000,
                "rebalance_timeout_ms": 30000,
                "member_id": "",
                "protocol_type": "bench",
                "protocols": [{"name": "range", "metadata": b""}],
            },
        )
        if join["error_code"] != 0:
            raise RuntimeError(f"JoinGroup: {join}")
        member, generation = join["member_id"], join["generation_id"]
        sync = await conn.call(
            14,
            3,
            {
                "group_id": group,
                "generation_id": generation,
                "member_id": member,
                "group_instance_id": None,
                "assignments": [{"member_id": member, "assignment": b""}],
            },
        )
        if sync["error_code"] != 0:
            raise RuntimeError(f"SyncGroup: {sync}")
        body = {
            "group_id": group,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
        }
        frames = [h.request_frame(12, 3, corr, body) for corr in range(args.window * 2)]
        pipes.append(conn.pipeline(frames, args.heartbeats, args.window))
    elapsed, cpu = await timed(broker, pipes)
    del conns
    for p in pipes:
        if h.decode_response(12, 3, p.kept["last"])["error_code"] != 0:
            raise RuntimeError(f"{ep.name}: a heartbeat failed")
    return 10 * args.heartbeats / elapsed, cpu


COMMIT_PARTITIONS = 8


async def commit_round(
    broker: h.BrokerProcess, ep: Endpoint, rnd: int, args: argparse.Namespace
) -> tuple[float, float]:
    topic = "acl-bench"
    if rnd == 0:
        h.create_topic(broker.port, topic, COMMIT_PARTITIONS)
        h.wait_topic_ready(broker.port, topic, COMMIT_PARTITIONS)
    conns = [await Conn.open(ep) for _ in range(10)]
    pipes = []
    for i, conn in enumerate(conns):
        body = {
            "group_id": f"c-{rnd}-{i}",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": p, "committed_metadata": ""}
                        for p in range(COMMIT_PARTITIONS)
                    ],
                }
            ],
        }
        frames = [h.request_frame(8, 2, corr, body) for corr in range(args.window * 2)]
        pipes.append(conn.pipeline(frames, args.commits, args.window))
    elapsed, cpu = await timed(broker, pipes)
    del conns
    for p in pipes:
        resp = h.decode_response(8, 2, p.kept["last"])
        codes = {q["error_code"] for t in resp["topics"] for q in t["partitions"]}
        if codes != {0}:
            raise RuntimeError(f"{ep.name}: a commit failed: {codes}")
    return 10 * args.commits / elapsed, cpu


def certificates() -> Certs:
    return make_certs(h.CACHE.parent / "bench-certs")


def broker_command(  # type: ignore[no-untyped-def]
    certs: Certs, users: Path, sasl_port: int, ssl_port: int | None = None
):
    def command(port: int) -> list[str]:
        base = h.kgroupd_command(port)
        base = base[: base.index("--host")] + base[base.index("--port") + 2 :]
        tls_only = "" if ssl_port is None else f",SSL://127.0.0.1:{ssl_port}"
        return [
            *base,
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}{tls_only}",
            "--ssl-certfile",
            str(certs.server_cert),
            "--ssl-keyfile",
            str(certs.server_key),
            "--sasl-users",
            str(users),
            "--initial-rebalance-delay-ms",
            "0",
        ]

    return command


async def tls_case(args: argparse.Namespace) -> list[str]:
    certs = certificates()
    users = h.CACHE.parent / "bench-certs" / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n")
    sasl_port, ssl_port = h.free_port(), h.free_port()
    command = broker_command(certs, users, sasl_port, ssl_port)
    broker = sasl_broker(command, sasl_port, [])
    while not h.try_connect(ssl_port):  # the SSL listener binds last
        time.sleep(0.01)
    context = ssl.create_default_context(cafile=str(certs.ca))
    endpoints = [
        Endpoint("PLAINTEXT", broker.port, None),
        Endpoint("SSL", ssl_port, context),
        Endpoint("SASL_SSL", sasl_port, context),
    ]
    produce: dict[str, list[tuple[float, float]]] = {e.name: [] for e in endpoints}
    beats: dict[str, list[tuple[float, float]]] = {e.name: [] for e in endpoints}
    try:
        for rnd in range(args.rounds + 1):  # round 0 warms up
            order = endpoints if rnd % 2 else endpoints[::-1]
            for ep in order:
                p = await produce_round(broker, ep, rnd, args)
                b = await heartbeat_round(broker, ep, rnd, args)
                note = f"round {rnd} {ep.name}: {p[0]:.0f} MB/s, {b[0]:.0f} heartbeats/s"
                print(note, file=sys.stderr)
                if rnd:
                    produce[ep.name].append(p)
                    beats[ep.name].append(b)
    finally:
        broker.stop()
        broker.cleanup_log()
    lines = [
        "| figure | PLAINTEXT | SASL_SSL (SCRAM-SHA-512) | SASL_SSL / PLAINTEXT |",
        "|---|---|---|---|",
    ]
    for label, table in (
        ("produce MB/s, 16 KiB batches", produce),
        ("Heartbeat/s, 10 connections pipelined", beats),
    ):
        lines.append(_row(label, table["PLAINTEXT"], table["SASL_SSL"]))
    # TLS alone (an SSL listener, no SASL): what TLS costs per broker CPU-second
    lines += ["", "| figure | PLAINTEXT | SSL | SSL / PLAINTEXT |", "|---|---|---|---|"]
    for label, table in (
        ("produce MB/s, 16 KiB batches", produce),
        ("Heartbeat/s, 10 connections pipelined", beats),
    ):
        lines.append(_row(label, table["PLAINTEXT"], table["SSL"]))
    return lines


async def acl_case(args: argparse.Namespace) -> list[str]:
    plain = h.BrokerProcess("kgroupd", extra=["--initial-rebalance-delay-ms", "0"]).start()
    acl = h.BrokerProcess(
        "kgroupd",
        extra=[
            "--initial-rebalance-delay-ms",
            "0",
            "--authorizer",
            "acl",
            "--allow-everyone-if-no-acl-found",
            "true",
        ],
    ).start()
    runs = [
        (Endpoint("PLAINTEXT", plain.port, None), plain),
        (Endpoint("ACL", acl.port, None), acl),
    ]
    beats: dict[str, list[tuple[float, float]]] = {"PLAINTEXT": [], "ACL": []}
    commits: dict[str, list[tuple[float, float]]] = {"PLAINTEXT": [], "ACL": []}
    try:
        for rnd in range(args.rounds + 1):
            order = runs if rnd % 2 else runs[::-1]
            for ep, broker in order:
                b = await heartbeat_round(broker, ep, rnd, args)
                c = await commit_round(broker, ep, rnd, args)
                print(
                    f"round {rnd} {ep.name}: {b[0]:.0f} hb/s, {c[0]:.0f} commits/s", file=sys.stderr
                )
                if rnd:
                    beats[ep.name].append(b)
                    commits[ep.name].append(c)
    finally:
        for broker in (plain, acl):
            broker.stop()
            broker.cleanup_log()
    return [
        "| figure | no authorizer | `--authorizer acl` | with / without |",
        "|---|---|---|---|",
        _row("Heartbeat/s, 10 connections pipelined", beats["PLAINTEXT"], beats["ACL"]),
        _row(
            f"OffsetCommit/s ({COMMIT_PARTITIONS} partitions), 10 connections pipelined",
            commits["PLAINTEXT"],
            commits["ACL"],
        ),
    ]


def _row(label: str, base: list[tuple[float, float]], other: list[tuple[float, float]]) -> str:
    def med(values: list[tuple[float, float]], i: int) -> float:
        return h.median([v[i] for v in values])

    a, b = med(base, 0), med(other, 0)
    # per broker CPU-second: the client shares the 2 cores and does its own TLS
    per_cpu = h.median([v[0] / v[1] for v in other]) / h.median([v[0] / v[1] for v in base])
    return (
        f"| {label} | {a:,.0f} (broker CPU {med(base, 1):.0%}) "
        f"| {b:,.0f} (broker CPU {med(other, 1):.0%}) | **{b / a:.2f}x** "
        f"(per broker CPU-second {per_cpu:.2f}x) |"
    )


# --- hostile clients before authentication ----------------------------------------------------

METADATA = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}


class Bystander:
    """An authenticated client asking Metadata back to back: its round trips (seconds)."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.rtts: list[float] = []
        self.since: float | None = None  # when the request in flight was sent
        self.stop = False

    async def run(self) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, OSError):
            while not self.stop:
                self.since = time.perf_counter()
                await self.conn.call(3, 12, METADATA)
                self.rtts.append(time.perf_counter() - self.since)
                self.since = None

    def figures(self, first: int) -> str:
        """median / p99 / max (ms) from round trip ``first`` on; one still waiting counts as
        what it has waited so far (shown with >)."""
        rtts = sorted(self.rtts[first:])
        waiting = time.perf_counter() - self.since if self.since is not None else 0.0
        if not rtts:
            return f"none answered (> {waiting * 1e3:,.0f} waiting)"
        worst = max(rtts[-1], waiting)
        mark = ">" if waiting > rtts[-1] else ""
        p99 = rtts[min(len(rtts) - 1, len(rtts) * 99 // 100)]
        return f"{h.median(rtts) * 1e3:.1f} / {p99 * 1e3:.1f} / {mark}{worst * 1e3:,.1f}"


def sasl_broker(
    command: Callable[[int], list[str]], sasl_port: int, extra: list[str]
) -> h.BrokerProcess:
    """Started once its SASL_SSL listener accepts too (the PLAINTEXT one binds first)."""
    broker = h.BrokerProcess("kgroupd", command=command, extra=extra).start()
    deadline = time.perf_counter() + 15
    while not h.try_connect(sasl_port):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the SASL_SSL listener never accepted; see {broker.log_path}")
        time.sleep(0.01)
    return broker


async def abuse_scenario(
    name: str,
    args: argparse.Namespace,
    certs: Certs,
    users: Path,
    attacker: ProcessPoolExecutor,
) -> str:
    sasl_port = h.free_port()
    broker = sasl_broker(broker_command(certs, users, sasl_port), sasl_port, [])
    context = ssl.create_default_context(cafile=str(certs.ca))
    by = Bystander(await Conn.open(Endpoint("SASL_SSL", sasl_port, context)))
    rss = [broker.rss_mib()]
    watching = True

    async def watch_rss() -> None:
        while watching:
            with contextlib.suppress(OSError, RuntimeError):
                rss.append(broker.rss_mib())
            await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(by.run()), asyncio.create_task(watch_rss())]
    await asyncio.sleep(0.5)  # warm
    loop, cafile = asyncio.get_running_loop(), str(certs.ca)
    first, outcome = len(by.rtts), ""
    try:
        if name == "idle":
            await asyncio.sleep(args.guess_seconds)
        elif name.endswith("token"):
            size = 4 * 1024 * 1024 if name.startswith("4 MiB") else 50_000_000
            run = partial(token_attack, sasl_port, cafile, size, args.token_cap)
            took, done = await loop.run_in_executor(attacker, run)
            outcome = f"closed after {took:.2f} s" if done else f"not done after {took:.0f} s"
        else:
            mechanism = "PLAIN" if "PLAIN" in name else MECHANISM
            run = partial(guesses, sasl_port, cafile, mechanism, args.guess_seconds)
            outcome = f"{await loop.run_in_executor(attacker, run):,.1f} guesses/s"
        figures = by.figures(first)
    finally:
        watching, by.stop = False, True
        broker.kill()  # a stalled broker would not stop in time
        broker.cleanup_log()
        await asyncio.gather(*tasks, return_exceptions=True)
    return f"| {name} | {figures} | {outcome or '-'} | {max(rss):,.0f} |"


def leak_case(certs: Certs, users: Path) -> str:
    """Median answer time (ms) of a wrong PLAIN password, known user / unknown user, on a
    broker without the failure delay (where it has the flag)."""
    sasl_port = h.free_port()
    command = broker_command(certs, users, sasl_port)
    env, cwd = h.process_env("kgroupd")
    usage = subprocess.run(
        [*command(0), "--help"], capture_output=True, text=True, env=env, cwd=cwd
    )
    extra = ["--connection-failed-authentication-delay-ms", "0"]
    extra = extra if extra[0] in usage.stdout else []  # a revision without it has no delay
    broker = sasl_broker(command, sasl_port, extra)
    try:
        times: dict[str, list[float]] = {u: [] for u in (USER, "nobody")}
        for _ in range(100):
            for user in times:
                times[user].append(guess(sasl_port, str(certs.ca), "PLAIN", user))
    finally:
        broker.stop()
        broker.cleanup_log()
    known, unknown = (h.median(times[u]) * 1e3 for u in (USER, "nobody"))
    return (
        f"wrong PLAIN password, answer time median (100 each): user who exists {known:.2f} ms, "
        f"user who does not {unknown:.2f} ms"
    )


async def abuse_case(args: argparse.Namespace) -> list[str]:
    certs = certificates()
    users = h.CACHE.parent / "bench-certs" / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\n")
    lines = [
        "| while | bystander Metadata round trip ms: median / p99 / max | attacker "
        "| broker RSS peak MiB |",
        "|---|---|---|---|",
    ]
    for name in (
        "idle",
        "4 MiB SCRAM token",
        "50 MB SCRAM token",
        "SCRAM-SHA-512 wrong passwords",
        "PLAIN wrong passwords",
    ):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            lines.append(await abuse_scenario(name, args, certs, users, pool))
        print(lines[-1], file=sys.stderr)
    lines += ["", leak_case(certs, users)]
    return lines


async def main_async(args: argparse.Namespace) -> int:
    started = h.stamp()
    load0 = h.machine()
    tables = []
    if args.only in ("all", "tls"):
        tables.append(await tls_case(args))
    if args.only in ("all", "acl"):
        tables.append(await acl_case(args))
    if args.only in ("all", "abuse"):
        tables.append(await abuse_case(args))
    print(f"\n{started}, {load0}; `{h.command_line()}`, kgroupd {h.kgroupd_revision()}")
    for lines in tables:
        print()
        print("\n".join(lines))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1500, help="produce requests per connection")
    ap.add_argument("--heartbeats", type=int, default=20000, help="heartbeats per connection")
    ap.add_argument("--commits", type=int, default=5000, help="commits per connection")
    ap.add_argument("--only", choices=["all", "tls", "acl", "abuse"], default="all")
    ap.add_argument("--guess-seconds", type=float, default=5.0, help="abuse: per scenario")
    ap.add_argument("--token-cap", type=float, default=60.0, help="abuse: give up on a token")
    ap.add_argument("--kgroupd-rev", metavar="REV", help="run kgroupd from this git revision")
    args = ap.parse_args()
    if args.kgroupd_rev:
        h.use_kgroupd_rev(args.kgroupd_rev)
    return h.uvloop_run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
