"""The clients of ``instructions_wire.py``: one blocking connection per API (over TLS and
SCRAM on a SASL_SSL endpoint), and for each hot API a set-up that returns the request to
repeat (a topic and its data, a group and its member made first)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
    context: ssl.SSLContext | None = None  # TLS (and SASL/SCRAM on SASL_SSL)


class Client:
    """One blocking connection: a request, then its answer (over TLS on an SSL or SASL_SSL
    endpoint, authenticated with SCRAM-SHA-512 first on SASL_SSL)."""

    def __init__(self, where: int | Endpoint) -> None:
        ep = where if isinstance(where, Endpoint) else Endpoint("PLAINTEXT", where)
        sock = socket.create_connection(("127.0.0.1", ep.port), timeout=600)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ep.context is not None:
            sock = ep.context.wrap_socket(sock, server_hostname="localhost")
        self.sock = sock
        if ep.name.startswith("SASL"):
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
    share: float = 1.0  # of --requests and --warmup (1 MiB batches: a tenth)


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


def fetch(
    c: Client, v: dict[int, int], partition: int = 1, batch: bytes = BATCH, batches: int = 1
) -> Step:
    for _ in range(max(4, batches)):
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
                        "partition_max_bytes": len(batch) * batches,  # whole batches
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


def fetch_many(c: Client, v: dict[int, int]) -> Step:
    return fetch(c, v, 4, BATCH, 64)


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
    # all of --requests: a tenth (20 counted after 3 warm-ups by default) once read 1.16x
    # c966aaf where 200 read 0.98-0.99x (BENCHMARKS.md, "Fetch of 64 batches, 2026-11-27")
    Api("Fetch (64 batches of 16 KiB)", (1, 0), fetch_many),
    Api("ListOffsets", (2,), list_offsets),
    Api("FindCoordinator", (10,), find_coordinator),
    Api("JoinGroup + SyncGroup (one member)", (11, 14), join_sync, 2),
    Api("Heartbeat", (12, 11, 14), heartbeat),
    Api(f"OffsetCommit ({PARTITIONS} partitions)", (8,), offset_commit),
    Api(f"OffsetFetch ({PARTITIONS} partitions)", (9, 8), offset_fetch),
    Api("ConsumerGroupHeartbeat (steady)", (68,), consumer_group_heartbeat),
]
