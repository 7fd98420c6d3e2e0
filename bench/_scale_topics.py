"""``bench_scale.py``'s retention and topics phases (issue 26): the broker's retention passes,
and topic changes rewriting ``topics.json`` with many topics."""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
from _scale_wire import Bystander, raw_call, stall


def retention_phase(port: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    """Nothing but the broker's retention passes (every ``--retention-check-ms``); then, with
    ``--retention-deletes``, passes that delete a segment in that many partitions."""
    seconds = args.retention_check_ms / 1000 * args.retention_passes + 0.5
    by.mark()
    time.sleep(seconds)
    samples = by.take()
    out = [
        f"retention passes every {args.retention_check_ms} ms for {seconds:.1f} s "
        f"(about {args.retention_passes}): bystander {stall(samples)}"
    ]
    n = args.retention_deletes
    if n:
        with socket.create_connection(("127.0.0.1", port)) as s:
            expiring(s, n, "scale-expiring", "60000")
            by.mark()
            deadline = time.perf_counter() + 60
            while time.perf_counter() < deadline:
                time.sleep(args.retention_check_ms / 1000)
                if log_starts(s, n, "scale-expiring") == n:
                    break
            samples = by.take()
            started = log_starts(s, n, "scale-expiring")
            out.append(
                f"retention passes deleting a segment in each of {n} partitions ({started} "
                f"deleted): bystander {stall(samples)}"
            )
            out.append(alter_retention(s, by, n))
    return out


def alter_retention(s: socket.socket, by: Bystander, n: int) -> str:
    """IncrementalAlterConfigs lowering retention.ms of a topic of ``n`` partitions whose first
    segments are an hour old: the broker applies it before the answer."""
    expiring(s, n, "scale-altered", "604800000")
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "scale-altered",
                "configs": [{"name": "retention.ms", "value": "60000", "config_operation": 0}],
            }
        ],
        "validate_only": False,
    }
    by.mark()
    raw, took = raw_call(s, 44, 1, body)
    samples = by.take()
    result = h.decode_response(44, 1, raw)["responses"][0]
    if result["error_code"]:
        raise RuntimeError(f"IncrementalAlterConfigs: {result}")
    started = log_starts(s, n, "scale-altered")
    return (
        f"IncrementalAlterConfigs retention.ms of {n} partitions ({started} segments deleted "
        f"when answered): request {took * 1000:.0f} ms; bystander {stall(samples)}"
    )


def expiring(s: socket.socket, n: int, name: str, retention_ms: str) -> None:
    """Topic ``name`` of ``n`` partitions, each with two segments, the first an hour old
    (segment.bytes 100; with retention.ms one minute the next retention pass deletes it)."""
    from kgroupd.protocol.records import build_batch

    configs = [
        {"name": "segment.bytes", "value": "100"},
        {"name": "retention.ms", "value": retention_ms},
    ]
    topic = {"name": name, "num_partitions": n, "replication_factor": 1}
    body = {"topics": [{**topic, "assignments": [], "configs": configs}], "timeout_ms": 60000}
    raw, _ = raw_call(s, 19, 7, {**body, "validate_only": False})
    result = h.decode_response(19, 7, raw)["topics"][0]
    if result["error_code"]:
        raise RuntimeError(f"CreateTopics {name}: {result}")
    old = int(time.time() * 1000) - 3_600_000
    batch = build_batch([(0, b"k", b"v" * 200, old)])
    parts = [{"index": p, "records": batch} for p in range(n)]
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": name, "partition_data": parts}],
    }
    for _ in range(2):
        raw, _ = raw_call(s, 0, 9, body)
        for t in h.decode_response(0, 9, raw)["responses"]:
            for p in t["partition_responses"]:
                if p["error_code"]:
                    raise RuntimeError(f"produce {name}-{p['index']}: {p['error_code']}")


def log_starts(s: socket.socket, n: int, name: str) -> int:
    """How many partitions of ``name`` start at offset 1 (retention took the first
    segment)."""
    parts = [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -2} for p in range(n)]
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": name, "partitions": parts}],
    }
    raw, _ = raw_call(s, 2, 7, body)
    resp = h.decode_response(2, 7, raw)
    return sum(1 for t in resp["topics"] for p in t["partitions"] if p["offset"] == 1)


def topics_phase(port: int, by: Bystander, args: argparse.Namespace) -> list[str]:
    """CreateTopics of one small topic, then DeleteTopics of it, ``--repeat`` times: each
    rewrites the topic table (``--seed-topics`` topics and more)."""
    created, deleted, create_samples, delete_samples = [], [], [], []
    with socket.create_connection(("127.0.0.1", port)) as s:
        for i in range(args.repeat):
            topic = {"name": f"scale-small-{i}", "num_partitions": 1, "replication_factor": 1}
            body = {"topics": [{**topic, "assignments": [], "configs": []}], "timeout_ms": 60000}
            by.mark()
            raw, took = raw_call(s, 19, 7, {**body, "validate_only": False})
            create_samples += by.take()
            created.append(took)
            result = h.decode_response(19, 7, raw)["topics"][0]
            if result["error_code"]:
                raise RuntimeError(f"CreateTopics: {result}")
            by.mark()
            raw, took = raw_call(
                s, 20, 6, {"topics": [{"name": topic["name"]}], "timeout_ms": 60000}
            )
            delete_samples += by.take()
            deleted.append(took)
            result = h.decode_response(20, 6, raw)["responses"][0]
            if result["error_code"]:
                raise RuntimeError(f"DeleteTopics: {result}")
            time.sleep(0.2)
        if args.batch_topics:
            many = [f"scale-batch-{i}" for i in range(args.batch_topics)]
            spec = {"num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            body = {
                "topics": [{"name": n, **spec} for n in many],
                "timeout_ms": 60000,
                "validate_only": False,
            }
            by.mark()
            raw, batch_created = raw_call(s, 19, 7, body)
            batch_create_samples = by.take()
            codes = {t["error_code"] for t in h.decode_response(19, 7, raw)["topics"]}
            if codes != {0}:
                raise RuntimeError(f"CreateTopics of {len(many)}: {codes}")
            by.mark()
            body = {"topics": [{"name": n} for n in many], "timeout_ms": 60000}
            raw, batch_deleted = raw_call(s, 20, 6, body)
            batch_delete_samples = by.take()
            codes = {t["error_code"] for t in h.decode_response(20, 6, raw)["responses"]}
            if codes != {0}:
                raise RuntimeError(f"DeleteTopics of {len(many)}: {codes}")
    topics = args.seed_topics + args.partitions // max(1, args.per_request)
    batch = []
    if args.batch_topics:
        batch = [
            f"CreateTopics of {args.batch_topics} topics of 1 partition in one request: request "
            f"{batch_created * 1000:.0f} ms; bystander {stall(batch_create_samples)}",
            f"DeleteTopics of them in one request: request {batch_deleted * 1000:.0f} ms; "
            f"bystander {stall(batch_delete_samples)}",
        ]
    return [
        *batch,
        f"CreateTopics of 1 partition with {topics} topics x {args.repeat}: request "
        f"{max(created) * 1000:.0f} ms max; bystander {stall(create_samples)}",
        f"DeleteTopics of it x {args.repeat}: request {max(deleted) * 1000:.0f} ms max; "
        f"bystander {stall(delete_samples)}",
    ]


def seed_topics(data_dir: Path, args: argparse.Namespace) -> None:
    """``--seed-topics`` topics in ``topics.json`` (format 1), read at the broker's start."""
    table = {
        f"seed-{i}": {
            "partitions": args.seed_partitions,
            "configs": {},
            "topic_id": str(uuid.uuid4()),
        }
        for i in range(args.seed_topics)
    }
    (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": table}))
