"""``kgroupd groups ...``: kafka-consumer-groups' list, describe, delete, delete-offsets and
reset-offsets, and copy-offsets (committed offsets of empty groups to another cluster)."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from kgroupd.protocol.errors import ErrorCode

from . import kafka_ops as ops
from .client import AdminClient, KafkaError, error_name
from .kafka_ops import EARLIEST, LATEST, Group, TopicPartition
from .output import emit, emit_json, note, records, table
from .properties import UsageError

DESCRIBE_COLUMNS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
MEMBER_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


class Failed(Exception):
    """Already reported on the output; exit 1."""


def _not_found(group: str) -> KafkaError:
    return KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group '{group}' does not exist.")


def _inactive_or_refuse(group: Group) -> None:
    if not group.inactive:
        raise KafkaError(
            ErrorCode.NON_EMPTY_GROUP,
            f"Assignments can only be reset if the group '{group.group_id}' is inactive, "
            f"but the current state is {group.state}.",
        )


# The states kafka-consumer-groups.sh --list --state accepts (classic and consumer groups),
# as Kafka spells them; given in any case.
STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
TYPES = ("classic", "consumer")


def _choices(flag: str, value: str | None, valid: tuple[str, ...]) -> list[str] | None:
    """``--state stable,EMPTY`` -> ["Stable", "Empty"] (Kafka's names, any case given); a name
    Kafka does not know is a usage error listing the valid ones."""
    given = _csv(value)
    if given is None:
        return None
    by_lower = {v.lower(): v for v in valid}
    unknown = [g for g in given if g.lower() not in by_lower]
    if unknown:
        raise UsageError(
            f"{flag} {value}: unknown {', '.join(repr(u) for u in unknown)}; "
            f"valid: {', '.join(valid)} (any case)"
        )
    return [by_lower[g.lower()] for g in given]


async def cmd_list(admin: AdminClient, args: argparse.Namespace) -> int:
    states = _choices("--state", args.state, STATES)
    types = _choices("--type", args.type, TYPES)
    rows = await ops.list_groups(admin, states, types)
    if args.output == "json":
        emit_json([{k: r[k] for k in ("group", "state", "type")} for r in rows])
    elif args.state is None and args.type is None:
        for r in rows:
            print(r["group"])
    else:
        table(
            ("GROUP", "TYPE", "STATE"),
            [(r["group"], r["type"].capitalize(), r["state"]) for r in rows],
        )
    return 0


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()] or None


async def cmd_describe(admin: AdminClient, args: argparse.Namespace) -> int:
    group = await ops.describe_group(admin, args.group)
    committed = await ops.committed_offsets(admin, args.group)
    if group.state.lower() == "dead" and not committed:
        raise _not_found(args.group)
    if args.members:
        members: list[tuple[Any, ...]] = [
            (args.group, m.member_id, m.host, m.client_id, len(m.assignment))
            for m in sorted(group.members, key=lambda m: m.member_id)
        ]
        if args.output == "json":
            out = records(MEMBER_COLUMNS, members)
            for r, m in zip(out, sorted(group.members, key=lambda m: m.member_id), strict=True):
                r["group_instance_id"] = m.instance_id
                r["assignment"] = [{"topic": t, "partition": p} for t, p in sorted(m.assignment)]
            emit_json(out)
        else:
            _remarks(group)
            table(MEMBER_COLUMNS, members)
        return 0
    owner: dict[TopicPartition, ops.Member] = {}
    for m in group.members:
        for tp in m.assignment:
            owner[tp] = m
    partitions = sorted(set(owner) | set(committed))
    ends = await ops.list_offsets(admin, partitions, LATEST) if partitions else {}
    rows: list[tuple[Any, ...]] = []
    for tp in partitions:
        offset = committed.get(tp)
        end = ends.get(tp)
        lag = end - offset if offset is not None and end is not None else None
        o = owner.get(tp)
        who = (o.member_id, o.host, o.client_id) if o is not None else (None, None, None)
        rows.append((args.group, tp[0], tp[1], offset, end, lag, *who))
    for m in sorted(group.members, key=lambda m: m.member_id):
        if not m.assignment:
            rows.append(
                (args.group, None, None, None, None, None, m.member_id, m.host, m.client_id)
            )
    if args.output == "json":
        emit_json(records(DESCRIBE_COLUMNS, rows))
    else:
        _remarks(group)
        table(DESCRIBE_COLUMNS, rows)
    return 0


def _remarks(group: Group) -> None:
    if not group.members:
        note(f"Consumer group '{group.group_id}' has no active members.")
    elif group.state.lower() in (
        "preparingrebalance",
        "completingrebalance",
        "assigning",
        "reconciling",
    ):
        note(f"Warning: Consumer group '{group.group_id}' is rebalancing.")


async def cmd_delete(admin: AdminClient, args: argparse.Namespace) -> int:
    failed = {}
    for g in args.group:
        code = await ops.delete_group(admin, g)
        if code != 0:
            failed[g] = error_name(code)
    return report_deletions(args, failed, "consumer groups", "Group")


def report_deletions(args: argparse.Namespace, failed: dict[str, str], kind: str, one: str) -> int:
    """What Kafka's tools print after deleting ``args.group`` (``failed``: group -> error
    name), or the JSON of it; raises ``Failed`` when any failed."""
    deleted = [g for g in args.group if g not in failed]
    if args.output == "json":
        emit_json([{"group": g, "error": failed.get(g)} for g in args.group])
    else:
        if deleted:
            names = ", ".join(f"'{g}'" for g in deleted)
            print(f"Deletion of requested {kind} ({names}) was successful.")
        if failed:
            print(f"Deletion of some {kind} failed:")
            for g, name in failed.items():
                print(f"* {one} '{g}' could not be deleted due to: {name}")
    if failed:
        raise Failed
    return 0


def _parse_topics(specs: list[str]) -> list[tuple[str, list[int] | None]]:
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise UsageError(f"--topic {spec!r}: no topic name")
        if not sep:
            out.append((topic, None))
            continue
        try:
            out.append((topic, sorted({int(p) for p in parts.split(",")})))
        except ValueError:
            raise UsageError(f"--topic {spec!r}: partitions must be numbers, e.g. T:0,1") from None
    return out


async def _partitions(
    admin: AdminClient, specs: list[str], fallback: dict[TopicPartition, int]
) -> list[TopicPartition]:
    """The partitions --topic names (every partition of a topic named without any)."""
    out: set[TopicPartition] = set()
    for topic, parts in _parse_topics(specs):
        if parts is None:
            known = [p for t, p in fallback if t == topic]
            try:
                parts = (await ops.partitions_of(admin, [topic]))[topic]
            except KafkaError as exc:
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not known:
                    raise
                parts = known
        out.update((topic, p) for p in parts)
    return sorted(out)


async def cmd_delete_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    committed = await ops.committed_offsets(admin, args.group)
    partitions = await _partitions(admin, args.topic, committed)
    results = await ops.delete_offsets(admin, args.group, partitions)
    rows = [
        (t, p, "Successful" if c == 0 else f"Error: {error_name(c)}")
        for (t, p), c in sorted(results.items())
    ]
    if args.output == "json":
        emit_json(
            [
                {"topic": t, "partition": p, "error": None if c == 0 else error_name(c)}
                for (t, p), c in sorted(results.items())
            ]
        )
    else:
        table(("TOPIC", "PARTITION", "STATUS"), rows)
    if any(results.values()):
        raise Failed
    return 0


def _timestamp_ms(text: str) -> int:
    """Kafka's --to-datetime: ISO 8601 (yyyy-MM-ddTHH:mm:ss.SSS[zone]); no zone: local time."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime {text!r} is not a date-time such as 2024-01-31T12:00:00.000"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


async def cmd_reset_offsets(admin: AdminClient, args: argparse.Namespace) -> int:
    if args.execute and args.dry_run:
        raise UsageError("give --execute or --dry-run, not both")
    group = await ops.describe_group(admin, args.group)
    _inactive_or_refuse(group)
    committed = await ops.committed_offsets(admin, args.group)
    if args.all_topics:
        partitions = sorted(committed)
    else:
        partitions = await _partitions(admin, args.topic, committed)
    earliest = await ops.list_offsets(admin, partitions, EARLIEST)
    latest = await ops.list_offsets(admin, partitions, LATEST)
    new: dict[TopicPartition, int] = {}
    if args.to_earliest:
        new = dict(earliest)
    elif args.to_latest:
        new = dict(latest)
    elif args.to_datetime is not None:
        found = await ops.list_offsets(admin, partitions, _timestamp_ms(args.to_datetime))
        new = {tp: (o if o >= 0 else latest[tp]) for tp, o in found.items()}
    else:
        for tp in partitions:
            if args.to_offset is not None:
                wanted = args.to_offset
            elif tp in committed:
                wanted = committed[tp] + args.shift_by
            else:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                    "current committed offset",
                )
            new[tp] = _clamp(tp, wanted, earliest[tp], latest[tp])
    rows = [(args.group, t, p, o) for (t, p), o in sorted(new.items())]
    if args.execute and new:
        errors = await ops.commit_offsets(admin, args.group, new)
        bad = {tp: c for tp, c in errors.items() if c != 0}
        if bad:
            for (t, p), c in sorted(bad.items()):
                note(f"Error: {t}-{p}: {error_name(c)}")
            (first,) = list(bad.values())[:1]
            raise KafkaError(first, "committing the new offsets")
    elif not args.execute and not args.dry_run:
        note(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --execute to reset the offsets (or --dry-run to say a dry run is meant)."
        )
    emit(args.output, RESET_COLUMNS, rows)
    return 0


def _clamp(tp: TopicPartition, wanted: int, lo: int, hi: int) -> int:
    if wanted < lo:
        note(
            f"New offset ({wanted}) is lower than earliest offset for topic partition "
            f"{tp[0]}-{tp[1]}. Value will be set to {lo}"
        )
        return lo
    if wanted > hi:
        note(
            f"New offset ({wanted}) is higher than latest offset for topic partition "
            f"{tp[0]}-{tp[1]}. Value will be set to {hi}"
        )
        return hi
    return wanted


async def cmd_copy_offsets(
    source: AdminClient, target: AdminClient, args: argparse.Namespace
) -> int:
    if args.group:
        names = list(dict.fromkeys(args.group))
    else:
        names = [r["group"] for r in await ops.list_groups(source, ["Empty"])]
    plan: list[tuple[str, dict[TopicPartition, int]]] = []
    for name in names:
        group = await ops.describe_group(source, name)
        committed = await ops.committed_offsets(source, name)
        if group.state.lower() == "dead" and not committed:
            raise _not_found(name)
        if not group.inactive:
            raise KafkaError(
                ErrorCode.NON_EMPTY_GROUP,
                f"Offsets can only be copied from an inactive group: '{name}' is {group.state}.",
            )
        there = await ops.describe_group(target, name)
        if not there.inactive:
            raise KafkaError(
                ErrorCode.NON_EMPTY_GROUP,
                f"Group '{name}' has active members on {target.bootstrap} ({there.state}).",
            )
        plan.append((name, committed))
    rows: list[tuple[Any, ...]] = []
    failed = False
    for name, committed in plan:
        errors = await ops.commit_offsets(target, name, committed) if committed else {}
        for (t, p), o in sorted(committed.items()):
            code = errors.get((t, p), 0)
            failed = failed or code != 0
            rows.append((name, t, p, o, None if code == 0 else error_name(code)))
    emit(args.output, ("GROUP", "TOPIC", "PARTITION", "OFFSET", "ERROR"), rows)
    if failed:
        raise Failed
    return 0
