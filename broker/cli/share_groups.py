"""``kgroupd share-groups ...``: kafka-share-groups' list, describe (offsets, members, state),
reset-offsets, delete-offsets and delete, over the Kafka protocol (ListGroups with the share
type, ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups): any broker that serves share groups.

As Kafka's tool: offsets can be reset or deleted only while the group has no members
("Share group 'G' is not empty."); reset-offsets shows the new start offsets and changes
nothing without --execute.
"""

from __future__ import annotations

import argparse
from typing import Any

from kgroupd.protocol.errors import ErrorCode

from . import kafka_ops as ops
from .client import AdminClient, KafkaError, check, error_name
from .groups import Failed, _partitions, _timestamp_ms, report_deletions
from .kafka_ops import EARLIEST, LATEST, TopicPartition
from .output import emit, emit_json, note, records, table

LIST_GROUPS = 16
SHARE_GROUP_DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 77, 90, 91, 92
OFFSET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG")
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
STATE_COLUMNS = ("GROUP", "STATE", "#MEMBERS", "GROUP-EPOCH", "ASSIGNMENT-EPOCH")
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def _group_error(resp: dict[str, Any]) -> int:
    return int(resp["groups"][0]["error_code"])


async def _describe(admin: AdminClient, group: str) -> dict[str, Any]:
    """ShareGroupDescribe of one group (GROUP_ID_NOT_FOUND raised with the tool's words)."""
    _, resp = await admin.group_request(
        group,
        SHARE_GROUP_DESCRIBE,
        {"group_ids": [group], "include_authorized_operations": False},
        lambda _v, r: _group_error(r),
    )
    g = resp["groups"][0]
    if g["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        raise KafkaError(g["error_code"], f"Share group '{group}' does not exist.")
    check(g["error_code"], g["error_message"])
    return dict(g)


async def _offsets(admin: AdminClient, group: str) -> dict[TopicPartition, tuple[int, int]]:
    """(start offset, lag) of every partition the group has state for."""
    _, resp = await admin.group_request(
        group,
        DESCRIBE_OFFSETS,
        {"groups": [{"group_id": group, "topics": None}]},
        lambda _v, r: _group_error(r),
    )
    g = resp["groups"][0]
    check(g["error_code"], g["error_message"])
    out: dict[TopicPartition, tuple[int, int]] = {}
    for t in g["topics"]:
        for p in t["partitions"]:
            check(p["error_code"], p["error_message"])
            out[(t["topic_name"], p["partition_index"])] = (p["start_offset"], p.get("lag", -1))
    return out


async def cmd_list(admin: AdminClient, args: argparse.Namespace) -> int:
    found: dict[str, str] = {}
    for conn in await admin.all_nodes():
        version, resp = await conn.request(
            LIST_GROUPS, {"states_filter": [], "types_filter": ["share"]}
        )
        check(resp["error_code"])
        if version < 5:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "ListGroups v5 (group types) needed")
        for g in resp["groups"]:
            found[g["group_id"]] = g["group_state"]
    wanted = {s.lower() for s in (args.state or "").split(",") if s}
    rows = [(g, s) for g, s in sorted(found.items()) if not wanted or s.lower() in wanted]
    if args.output == "json":
        emit_json([{"group": g, "state": s} for g, s in rows])
    elif args.state is None:
        for g, _s in rows:
            print(g)
    else:
        table(("GROUP", "STATE"), rows)
    return 0


async def cmd_describe(admin: AdminClient, args: argparse.Namespace) -> int:
    g = await _describe(admin, args.group)
    members = sorted(g["members"], key=lambda m: m["member_id"])
    if args.state:
        emit(
            args.output,
            STATE_COLUMNS,
            [(args.group, g["group_state"], len(members), g["group_epoch"], g["assignment_epoch"])],
        )
        return 0
    if args.members:
        rows = []
        for m in members:
            parts = [
                (tp["topic_name"], p)
                for tp in m["assignment"]["topic_partitions"]
                for p in tp["partitions"]
            ]
            shown = ",".join(f"{t}:{p}" for t, p in sorted(parts))
            rows.append(
                (args.group, m["member_id"], m["client_host"], m["client_id"], len(parts), shown)
            )
        if args.output == "json":
            emit_json(records(MEMBER_COLUMNS, rows))
        else:
            if not members:
                note(f"Share group '{args.group}' has no active members.")
            table(MEMBER_COLUMNS, rows)
        return 0
    offsets = await _offsets(admin, args.group)
    rows2: list[tuple[Any, ...]] = [
        (args.group, t, p, start if start >= 0 else None, lag if lag >= 0 else None)
        for (t, p), (start, lag) in sorted(offsets.items())
    ]
    if args.output == "json":
        emit_json(records(OFFSET_COLUMNS, rows2))
    else:
        if not members:
            note(f"Share group '{args.group}' has no active members.")
        table(OFFSET_COLUMNS, rows2)
    return 0


async def cmd_reset_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.execute and args.dry_run:
        from .properties import UsageError

        raise UsageError("give --execute or --dry-run, not both")
    try:
        g = await _describe(admin, args.group)
    except KafkaError as exc:
        if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise
        g = {"members": []}  # a new group: the reset makes it
    if g["members"]:
        raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Share group '{args.group}' is not empty.")
    held = await _offsets(admin, args.group) if "group_state" in g else {}
    if args.all_topics:
        partitions = sorted(held)
    else:
        partitions = await _partitions(admin, args.topic, {tp: 0 for tp in held})
    latest = await ops.list_offsets(admin, partitions, LATEST)
    new: dict[TopicPartition, int]
    if args.to_earliest:
        new = await ops.list_offsets(admin, partitions, EARLIEST)
    elif args.to_latest:
        new = dict(latest)
    elif args.to_datetime is not None or args.by_duration is not None:
        when = (
            _timestamp_ms(args.to_datetime)
            if args.to_datetime is not None
            else _now_ms() - _duration_ms(args.by_duration)
        )
        found = await ops.list_offsets(admin, partitions, when)
        new = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
    else:
        new = {tp: args.to_offset for tp in partitions}
    rows = [(args.group, t, p, o) for (t, p), o in sorted(new.items())]
    if args.execute and new:
        by_topic: dict[str, list[dict[str, int]]] = {}
        for (t, p), o in sorted(new.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": o})
        body = {
            "group_id": args.group,
            "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        _, resp = await admin.group_request(
            args.group, ALTER_OFFSETS, body, lambda _v, r: r["error_code"]
        )
        check(resp["error_code"], resp["error_message"])
        bad = [
            (t["topic_name"], p["partition_index"], p["error_code"])
            for t in resp["responses"]
            for p in t["partitions"]
            if p["error_code"]
        ]
        for t, p, c in bad:
            note(f"Error: {t}-{p}: {error_name(c)}")
        if bad:
            raise Failed
    elif not args.execute and not args.dry_run:
        note(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --execute to reset the offsets (or --dry-run to say a dry run is meant)."
        )
    emit(args.output, RESET_COLUMNS, rows)
    return 0


async def cmd_delete_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    topics = [spec.partition(":")[0] for spec in args.topic]
    body = {"group_id": args.group, "topics": [{"topic_name": t} for t in topics]}
    _, resp = await admin.group_request(
        args.group, DELETE_OFFSETS, body, lambda _v, r: r["error_code"]
    )
    if resp["error_code"] == ErrorCode.NON_EMPTY_GROUP:
        raise KafkaError(resp["error_code"], f"Share group '{args.group}' is not empty.")
    check(resp["error_code"], resp["error_message"])
    rows = [
        (
            t["topic_name"],
            "Successful" if t["error_code"] == 0 else f"Error: {error_name(t['error_code'])}",
        )
        for t in resp["responses"]
    ]
    emit(args.output, ("TOPIC", "STATUS"), rows)
    if any(t["error_code"] for t in resp["responses"]):
        raise Failed
    return 0


async def cmd_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    failed: dict[str, str] = {}
    for group in args.group:
        try:
            await _describe(admin, group)  # only share groups: Kafka's tool asks the same
        except KafkaError as exc:
            failed[group] = error_name(exc.code)
            continue
        code = await ops.delete_group(admin, group)
        if code:
            failed[group] = error_name(code)
    return report_deletions(args, failed, "share groups", "Share group")


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _duration_ms(text: str) -> int:
    """Kafka's --by-duration: an ISO-8601 duration (PnDTnHnMnS)."""
    from kgroupd.broker.share.group_config import by_duration_ms

    from .properties import UsageError

    found = by_duration_ms("by_duration:" + text)
    if found is None:
        raise UsageError(f"--by-duration {text!r} is not a duration such as PT1H or P1DT2H")
    return found


def add_parser(tools: Any, common: argparse.ArgumentParser, parser_class: Any) -> None:
    """``share-groups`` and its commands (``kgroupd.broker.cli.admin``)."""
    share = tools.add_parser("share-groups", help="share groups (kafka-share-groups)")
    s = share.add_subparsers(dest="command", required=True, parser_class=parser_class)
    p = s.add_parser("list", parents=[common], help="list share groups")
    p.add_argument("--state", nargs="?", const="", metavar="S[,S...]", help="shows states")
    p = s.add_parser("describe", parents=[common], help="start offsets, members or state")
    p.add_argument("group")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--members", action="store_true", help="the members")
    what.add_argument("--state", action="store_true", help="the group's state and epochs")
    what.add_argument("--offsets", action="store_true", help="start offsets and lag [default]")
    p = s.add_parser("reset-offsets", parents=[common], help="move an empty group's start offsets")
    p.add_argument("group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="T[:P,...]", help="repeatable")
    scope.add_argument("--all-topics", action="store_true", help="every topic with state")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-01-31T12:00:00.000")
    to.add_argument("--by-duration", metavar="PnDTnHnMnS", help="e.g. PT1H")
    p.add_argument("--execute", action="store_true", help="alter the start offsets")
    p.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    p = s.add_parser("delete-offsets", parents=[common], help="forget a group's offsets")
    p.add_argument("group")
    p.add_argument("--topic", action="append", required=True, metavar="T", help="repeatable")
    p = s.add_parser("delete", parents=[common], help="delete empty share groups")
    p.add_argument("group", nargs="+")


COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "reset-offsets": cmd_reset_offsets,
    "delete-offsets": cmd_delete_offsets,
    "delete": cmd_delete,
}
