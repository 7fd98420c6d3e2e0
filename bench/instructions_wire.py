"""Machine instructions per request of each hot API, over the whole broker process and real
sockets, counted by valgrind's callgrind.

    python bench/instructions_wire.py [--requests 200] [--kgroupd-rev REV ...] [--apis A,B]
                                      [--tls]

The broker (default flags, in memory, metrics on) runs under ``valgrind --tool=callgrind``
from the working tree and from each ``--kgroupd-rev`` (a ``git archive``, as
``bench/_harness.py`` runs old revisions). For each API a blocking client on one connection
sets up what the API needs (a topic and its data, a group and its member), sends ``--warmup``
requests, then zeroes the broker's counters (``callgrind_control -z``), sends ``--requests``
requests one at a time (each answer read before the next request: one read, one dispatch,
one write per request, as a client waiting on its answer) and reads the counters back
(``callgrind_control -e``, every thread of the process). The broker's idle instructions (its
timers, over the same wall time: measured apart before the first API and after the last) are
taken off; what is left, divided by the requests, is the instructions per request: the
event loop, the socket reads and writes, framing, the header, dispatch, authorization,
metrics, the handler and the response, all of it.

Each API is sent at the highest version every tree compared serves (asked of each tree's
ApiVersions first, capped where a later version names topics by id), so the trees answer
the same bytes. Join+Sync counts one JoinGroup and one SyncGroup (a one-member classic group
rebalancing on each join); the 1 MiB batches get a tenth of ``--requests``. ``--tls`` starts
each broker with a SASL_SSL listener beside PLAINTEXT (bench_security's test certificate, TLS
1.3, SCRAM-SHA-512 done before counting) and counts every API on both, each with groups of
its own. Needs ``valgrind`` (Debian package); about 5 minutes per tree (twice with --tls).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from bench_throughput import build_batch

TOPIC = "iw"
PARTITIONS = 8
RUN = [""]  # the listener counted: each has groups of its own (a member of one never waits)


def group(name: str) -> str:
    return f"iw-{name}{RUN[0]}"


# The highest version each API is sent at (a later one names topics by id, or is not needed)
CAPS = {18: 3, 3: 12, 0: 9, 1: 12, 2: 9, 10: 4, 11: 9, 14: 5, 12: 4, 8: 9, 9: 9, 68: 0}


@dataclass(frozen=True)
class Endpoint:
    name: str  # the listener's security protocol
    port: int
    context: ssl.SSLContext | None = None  # TLS (then SASL/SCRAM too)


class Client:
    """One blocking connection: a request, then its answer (over TLS and authenticated with
    SCRAM-SHA-512 first on a SASL_SSL endpoint)."""

    def __init__(self, where: int | Endpoint) -> None:
        ep = where if isinstance(where, Endpoint) else Endpoint("PLAINTEXT", where)
        sock = socket.create_connection(("127.0.0.1", ep.port), timeout=600)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ep.context is not None:
            sock = ep.context.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        if ep.context is not None:
            self.scram()

    def scram(self) -> None:
        import scramp
        from bench_security import MECHANISM, PASSWORD, USER

        if self.call(17, 1, {"mechanism": MECHANISM})["error_code"]:
            raise SystemExit("SaslHandshake refused")
        client = scramp.ScramClient([MECHANISM], USER, PASSWORD)
        first = self.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first["auth_bytes"].decode())
        final = self.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
        if final["error_code"]:
            raise SystemExit(f"SCRAM failed: {final}")

    def raw(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        head = self._exact(4)
        return self._exact(int.from_bytes(head, "big"))

    def call(self, api: int, version: int, body: dict[str, Any]) -> Any:
        return h.decode_response(api, version, self.raw(h.request_frame(api, version, 7, body)))

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def errors(answer: Any) -> list[int]:
    """Every non-zero error_code in a decoded answer."""
    found: list[int] = []
    if isinstance(answer, dict):
        for key, value in answer.items():
            if key == "error_code" and value:
                found.append(value)
            else:
                found += errors(value)
    elif isinstance(answer, list):
        for item in answer:
            found += errors(item)
    return found


# ---------------------------------------------------------------------------------------
# the APIs: each a setup (run once, before the warm-up) that returns the step to repeat


Step = Callable[[], None]


@dataclass(frozen=True)
class Api:
    name: str
    keys: tuple[int, ...]  # every API key it sends (each must be served)
    setup: Callable[[Client, dict[int, int]], Step]
    shown: int = 1  # how many of ``keys`` are counted (their versions shown)
    share: float = 1.0  # of --requests and --warmup (1 MiB requests: a tenth)


def _fixed(client: Client, api: int, version: int, body: dict[str, Any]) -> Step:
    frame = h.request_frame(api, version, 7, body)
    answer = h.decode_response(api, version, client.raw(frame))
    if errors(answer):
        raise SystemExit(f"api {api} v{version} answers errors {errors(answer)}: {answer}")

    def step() -> None:
        client.raw(frame)

    return step


def api_versions(c: Client, v: dict[int, int]) -> Step:
    return _fixed(c, 18, v[18], {"client_software_name": "bench", "client_software_version": "1"})


def metadata(c: Client, v: dict[int, int]) -> Step:
    body = {
        "topics": [{"name": TOPIC, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return _fixed(c, 3, v[3], body)


BATCH, RECORDS = build_batch(16384)  # 15 records of 1 KiB, as bench_throughput's
BIG_BATCH, BIG_RECORDS = build_batch(1 << 20)  # 1,014 records of 1 KiB


def _produce_body(partition: int, batch: bytes = BATCH) -> dict[str, Any]:
    data = [{"index": partition, "records": batch}]
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "partition_data": data}],
    }


def produce(c: Client, v: dict[int, int]) -> Step:
    return _fixed(c, 0, v[0], _produce_body(0))


def produce_big(c: Client, v: dict[int, int]) -> Step:
    return _fixed(c, 0, v[0], _produce_body(2, BIG_BATCH))


def fetch(c: Client, v: dict[int, int], partition: int = 1, batch: bytes = BATCH) -> Step:
    for _ in range(4):
        c.call(0, v[0], _produce_body(partition, batch))
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 52428800,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "last_fetched_epoch": -1,
                        "partition_max_bytes": len(batch),  # one batch a fetch
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return _fixed(c, 1, v[1], body)


def fetch_big(c: Client, v: dict[int, int]) -> Step:
    return fetch(c, v, 3, BIG_BATCH)


def list_offsets(c: Client, v: dict[int, int]) -> Step:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }
    return _fixed(c, 2, v[2], body)


def find_coordinator(c: Client, v: dict[int, int]) -> Step:
    body = {"key": group("classic"), "key_type": 0, "coordinator_keys": [group("classic")]}
    return _fixed(c, 10, v[10], body)


def _join(c: Client, v: dict[int, int], member: str, name: str = "classic") -> Any:
    body = {
        "group_id": group(name),
        "session_timeout_ms": 45000,
        "rebalance_timeout_ms": 60000,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x02iw"}],
        "reason": None,
    }
    return c.call(11, v[11], body)


def _sync(c: Client, v: dict[int, int], member: str, generation: int, name: str = "classic") -> Any:
    body = {
        "group_id": group(name),
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": b"\x00\x00\x00\x00\x00\x00"}],
    }
    return c.call(14, v[14], body)


def _member(c: Client, v: dict[int, int], name: str = "classic") -> tuple[str, int]:
    """A one-member classic group, stable: (member id, generation)."""
    answer = _join(c, v, "", name)
    member = answer["member_id"]
    if answer["error_code"]:  # MEMBER_ID_REQUIRED (v4+): join again with the id
        answer = _join(c, v, member, name)
    if answer["error_code"]:
        raise SystemExit(f"JoinGroup: {answer}")
    generation = answer["generation_id"]
    synced = _sync(c, v, member, generation, name)
    if synced["error_code"]:
        raise SystemExit(f"SyncGroup: {synced}")
    return member, generation


def join_sync(c: Client, v: dict[int, int]) -> Step:
    member, _ = _member(c, v)

    def step() -> None:
        answer = _join(c, v, member)
        if answer["error_code"] or _sync(c, v, member, answer["generation_id"])["error_code"]:
            raise SystemExit("Join+Sync failed")

    return step


def heartbeat(c: Client, v: dict[int, int]) -> Step:
    member, generation = _member(c, v, "heartbeat")
    body = {
        "group_id": group("heartbeat"),
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": None,
    }
    return _fixed(c, 12, v[12], body)


def _commit_body() -> dict[str, Any]:
    return {
        "group_id": group("commits"),
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": 10 + p,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": "",
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
    }


def offset_commit(c: Client, v: dict[int, int]) -> Step:
    return _fixed(c, 8, v[8], _commit_body())


def offset_fetch(c: Client, v: dict[int, int]) -> Step:
    c.call(8, v[8], _commit_body())
    partitions = list(range(PARTITIONS))
    topics = [{"name": TOPIC, "partition_indexes": partitions}]
    body = {
        "group_id": group("commits"),
        "topics": topics,
        "groups": [
            {"group_id": group("commits"), "member_id": None, "member_epoch": -1, "topics": topics}
        ],
        "require_stable": False,
    }
    return _fixed(c, 9, v[9], body)


def consumer_group_heartbeat(c: Client, v: dict[int, int]) -> Step:
    first = {
        "group_id": group("next"),
        "member_id": "",
        "member_epoch": 0,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": 60000,
        "subscribed_topic_names": [TOPIC],
        "server_assignor": None,
        "topic_partitions": [],
    }
    answer = c.call(68, v[68], first)
    if answer["error_code"]:
        raise SystemExit(f"ConsumerGroupHeartbeat: {answer}")
    member, epoch = answer["member_id"], answer["member_epoch"]
    owned: list[dict[str, Any]] = []
    for _ in range(20):  # until the assignment is acknowledged and stable
        assigned = answer.get("assignment")
        if assigned is not None:
            owned = [
                {"topic_id": t["topic_id"], "partitions": t["partitions"]}
                for t in assigned["topic_partitions"]
            ]
        steady = {**first, "member_id": member, "member_epoch": epoch, "topic_partitions": owned}
        answer = c.call(68, v[68], steady)
        if answer["error_code"]:
            raise SystemExit(f"ConsumerGroupHeartbeat: {answer}")
        if answer["member_epoch"] == epoch and answer.get("assignment") is None and owned:
            break
        epoch = answer["member_epoch"]
    # steady state, as the Java client sends it: the fields that did not change are null
    body = {
        **first,
        "member_id": member,
        "member_epoch": epoch,
        "rebalance_timeout_ms": -1,
        "subscribed_topic_names": None,
        "topic_partitions": None,
    }
    return _fixed(c, 68, v[68], body)


APIS = [
    Api("ApiVersions", (18,), api_versions),
    Api("Metadata", (3,), metadata),
    Api("Produce (one batch of 15 x 1 KiB records)", (0,), produce),
    Api("Produce (one batch of 1,014 x 1 KiB records)", (0,), produce_big, share=0.1),
    Api("Fetch (one 16 KiB batch)", (1, 0), fetch),
    Api("Fetch (one 1 MiB batch)", (1, 0), fetch_big, share=0.1),
    Api("ListOffsets", (2,), list_offsets),
    Api("FindCoordinator", (10,), find_coordinator),
    Api("JoinGroup + SyncGroup (one member)", (11, 14), join_sync, 2),
    Api("Heartbeat", (12, 11, 14), heartbeat),
    Api(f"OffsetCommit ({PARTITIONS} partitions)", (8,), offset_commit),
    Api(f"OffsetFetch ({PARTITIONS} partitions)", (9, 8), offset_fetch),
    Api("ConsumerGroupHeartbeat (steady)", (68,), consumer_group_heartbeat),
]


# ---------------------------------------------------------------------------------------
# brokers


def served(src: Path | None) -> dict[int, int]:
    """api key -> the highest version the tree serves (a broker started without valgrind)."""
    h.KGROUPD_SRC = src
    with h.BrokerProcess("kgroupd", command=lambda port: broker_command(src, port)) as b:
        answer = Client(b.port).call(18, 0, {})
    return {a["api_key"]: a["max_version"] for a in answer["api_keys"]}


def broker_command(src: Path | None, port: int) -> list[str]:
    command = h.kgroupd_command_for(src, port)
    if not command[0].endswith("python") and not command[0].startswith(sys.executable):
        command = [sys.executable, "-m", "kgroupd.broker", *command[1:]]
    return command


def callgrind_command(src: Path | None, port: int) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--vgdb=yes",
        *broker_command(src, port),
    ]


_THREAD = re.compile(r"^\s*Th\s+\d+\s+([\d,]+)", re.M)


def counters(pid: int) -> int:
    """The instructions of every thread of ``pid`` since the last zeroing."""
    if DRY:
        return 0
    out = subprocess.run(
        ["callgrind_control", "-e", str(pid)], capture_output=True, text=True, check=True
    ).stdout
    threads = [int(n.replace(",", "")) for n in _THREAD.findall(out)]
    if threads[1:] and sum(threads[1:]) > threads[0] / 100:
        print(f"  (threads: {threads})", file=sys.stderr)
    return sum(threads)


DRY = False  # --dry: no valgrind, nothing counted (to try the clients)


def zero(pid: int) -> None:
    if DRY:
        return
    subprocess.run(["callgrind_control", "-z", str(pid)], capture_output=True, check=True)


def idle_rate(pid: int, seconds: float) -> float:
    zero(pid)
    t0 = time.perf_counter()
    time.sleep(seconds)
    n = counters(pid)
    return n / (time.perf_counter() - t0)


def settle(pid: int, seconds: float, quiet: float = 1e6, most: float = 600) -> float:
    """Wait out the work after start-up (a thread importing what the broker loads lazily: tens
    of millions of instructions a second under valgrind, for a minute) until the idle rate
    is below ``quiet`` a second; that rate."""
    deadline = time.monotonic() + most
    while True:
        rate = idle_rate(pid, seconds)
        if rate < quiet or DRY or time.monotonic() > deadline:
            return rate
        print(f"  settling: {rate:,.0f} instructions/s", file=sys.stderr)


def count_tree(
    src: Path | None, versions: dict[int, int], apis: list[Api], args: argparse.Namespace
) -> dict[tuple[str, str], float | None]:
    """Instructions per request of each API, on each listener counted (PLAINTEXT; and
    SASL_SSL with ``--tls``), of the tree at ``src`` (None: the working tree)."""
    h.KGROUPD_SRC = src
    command = broker_command if args.dry else callgrind_command
    tls: tuple[Path, int, ssl.SSLContext] | None = None
    if args.tls:
        from bench_security import PASSWORD, USER, certificates

        certs = certificates()
        users = h.CACHE.parent / "bench-certs" / "users.txt"
        users.write_text(f"{USER}:{PASSWORD}\n")
        tls = (users, h.free_port(), ssl.create_default_context(cafile=str(certs.ca)))

        def listeners(port: int) -> list[str]:
            assert tls is not None
            base = command(src, port)
            base = base[: base.index("--host")] + base[base.index("--port") + 2 :]
            return [
                *base,
                "--listeners",
                f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{tls[1]}",
                "--ssl-certfile",
                str(certs.server_cert),
                "--ssl-keyfile",
                str(certs.server_key),
                "--sasl-users",
                str(tls[0]),
            ]

        broker = h.BrokerProcess("kgroupd", command=listeners)
    else:
        broker = h.BrokerProcess("kgroupd", command=lambda port: command(src, port))
    broker.start(timeout=600)
    endpoints = [Endpoint("PLAINTEXT", broker.port)]
    if tls is not None:
        endpoints.append(Endpoint("SASL_SSL", tls[1], tls[2]))
    out: dict[tuple[str, str], float | None] = {}
    try:
        admin = Client(broker.port)
        admin.call(
            19,
            1,
            {
                "topics": [{"name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1}],
                "timeout_ms": 30000,
            },
        )
        idle_before = settle(broker.pid, args.idle_seconds)
        runs: list[tuple[tuple[str, str], int, float, int]] = []
        for api in apis:
            for ep in endpoints:
                if any(k not in versions for k in api.keys):
                    out[api.name, ep.name] = None
                    continue
                RUN[0] = "" if ep.name == "PLAINTEXT" else f"-{ep.name}"
                client = Client(ep)
                step = api.setup(client, versions)
                for _ in range(max(2, round(args.warmup * api.share))):
                    step()
                requests = max(5, round(args.requests * api.share))
                zero(broker.pid)
                t0 = time.perf_counter()
                for _ in range(requests):
                    step()
                elapsed = time.perf_counter() - t0
                runs.append(((api.name, ep.name), counters(broker.pid), elapsed, requests))
                client.close()
                print(
                    f"  {api.name} on {ep.name}: {runs[-1][1]:,} instructions in {elapsed:.1f} s",
                    file=sys.stderr,
                )
        idle_after = idle_rate(broker.pid, args.idle_seconds)
        idle = (idle_before + idle_after) / 2
        print(f"  idle: {idle_before:,.0f} / {idle_after:,.0f} instructions/s", file=sys.stderr)
        for key, total, elapsed, requests in runs:
            out[key] = (total - idle * elapsed) / requests
        admin.close()
    finally:
        broker.stop(timeout=60)
        broker.cleanup_log()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200, help="counted requests per API")
    ap.add_argument("--warmup", type=int, default=30, help="uncounted requests per API first")
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--kgroupd-rev", action="append", default=[], help="also count REV")
    ap.add_argument("--apis", help="comma-separated prefixes of the APIs to count (default all)")
    ap.add_argument(
        "--tls",
        action="store_true",
        help="also count each API over a SASL_SSL listener (TLS 1.3, SCRAM-SHA-512) of the same "
        "broker",
    )
    ap.add_argument("--dry", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DRY
    DRY = args.dry
    apis = APIS
    if args.apis:
        wanted = [w.strip().lower() for w in args.apis.split(",")]
        apis = [a for a in APIS if any(a.name.lower().startswith(w) for w in wanted)]
    load0 = os.getloadavg()[0]
    print(f"# {h.command_line()}\n{h.stamp()}; {h.machine()}", flush=True)
    trees: list[tuple[str, Path | None]] = [(h.kgroupd_revision(), None)]
    for rev in args.kgroupd_rev:
        sha, rev_src = h.kgroupd_rev_src(rev)
        trees.append((f"{rev} ({sha})", rev_src))
    tables = [served(src) for _, src in trees]
    # the same version for every tree that serves the API (its own for a tree alone)
    common = {
        key: min([CAPS[key]] + [t[key] for t in tables if key in t])
        for key in CAPS
        if any(key in t for t in tables)
    }
    results = []
    for (label, src), table in zip(trees, tables, strict=True):
        versions = {key: version for key, version in common.items() if key in table}
        print(f"counting {label}", file=sys.stderr)
        results.append(count_tree(src, versions, apis, args))
    listeners = ["PLAINTEXT", "SASL_SSL"] if args.tls else ["PLAINTEXT"]
    columns = [(label, name) for label, _ in trees for name in listeners]
    head = ["API (version)"]
    head += [f"{label} {name}" if args.tls else label for label, name in columns]
    if args.tls:
        head += [f"{label.split(' ')[0]}: SASL_SSL / PLAINTEXT" for label, _ in trees]
    head += [f"this tree / {label.split(' ')[0]}" for label, _ in trees[1:]]
    print(
        f"\ninstructions per request, {args.requests} requests each after {args.warmup} "
        "(a tenth of both for the 1 MiB batches)"
    )
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))

    def ratio(a: float | None, b: float | None) -> str:
        return "n/a" if a is None or not b else f"{a / b:.2f}x"

    for api in apis:
        shown = "/".join(f"v{common[k]}" for k in api.keys[: api.shown] if k in common)
        row = [f"{api.name} ({shown})"]
        values = {
            (label, name): result.get((api.name, name))
            for (label, _), result in zip(trees, results, strict=True)
            for name in listeners
        }
        row += ["n/a" if values[c] is None else f"{values[c]:,.0f}" for c in columns]
        if args.tls:
            row += [
                ratio(values[label, "SASL_SSL"], values[label, "PLAINTEXT"]) for label, _ in trees
            ]
        first = trees[0][0]
        row += [
            ratio(values[first, "PLAINTEXT"], values[label, "PLAINTEXT"]) for label, _ in trees[1:]
        ]
        print("| " + " | ".join(row) + " |")
    print(f"\n{h.stamp()}: load avg {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
