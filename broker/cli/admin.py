"""The argument parsers of ``kgroupd groups ...`` and ``kgroupd topics ...`` and their run."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import NoReturn

from .client import AdminClient, ConnectError, KafkaError, split_address
from .properties import ClientSettings, UsageError, load_settings


class _Parser(argparse.ArgumentParser):
    """Bad usage: one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="the broker to connect to (comma-separated for several) [127.0.0.1:9092]",
    )
    common.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties as Kafka's tools read them (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location/type=PEM, ssl.keystore.location/type=PEM, "
        "ssl.endpoint.identification.algorithm)",
    )
    common.add_argument("--output", choices=("text", "json"), default="text", help="[text]")
    return common


def _topic_flag(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        required=required,
        metavar="T[:P,...]",
        help="a topic, or some of its partitions; repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    root = _Parser(prog="kgroupd", description="kgroupd's admin tools (Kafka protocol).")
    tools = root.add_subparsers(dest="tool", required=True, parser_class=_Parser)

    groups = tools.add_parser("groups", help="consumer groups (kafka-consumer-groups)")
    g = groups.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = g.add_parser("list", parents=[common], help="list consumer groups")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="S[,S...]",
        help="only groups in these states (Stable, Empty, ...); shows states",
    )
    p.add_argument("--type", metavar="classic|consumer", help="only groups of this type")
    p = g.add_parser("describe", parents=[common], help="offsets, lag and members of a group")
    p.add_argument("group")
    p.add_argument("--members", action="store_true", help="the members instead of offsets")
    p = g.add_parser("delete", parents=[common], help="delete empty groups")
    p.add_argument("group", nargs="+")
    p = g.add_parser("delete-offsets", parents=[common], help="delete a group's offsets")
    p.add_argument("group")
    _topic_flag(p, required=True)
    p = g.add_parser(
        "reset-offsets",
        parents=[common],
        help="move an inactive group's offsets (a dry run unless --execute)",
    )
    p.add_argument("group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,...]",
        help="a topic, or some of its partitions; repeatable",
    )
    scope.add_argument("--all-topics", action="store_true", help="every topic with an offset")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-01-31T12:00:00.000")
    to.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    p = g.add_parser(
        "copy-offsets",
        parents=[common],
        help="copy committed offsets of empty groups to another cluster",
    )
    p.add_argument("group", nargs="*", help="the groups (default: every Empty group)")
    p.add_argument("--to", required=True, metavar="BOOTSTRAP", help="the other cluster")
    p.add_argument(
        "--to-command-config",
        metavar="FILE",
        help="client properties for --to (default: --command-config's)",
    )

    from .share_groups import add_parser as add_share_groups

    add_share_groups(tools, common, _Parser)

    topics = tools.add_parser("topics", help="topics (kafka-topics)")
    t = topics.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = t.add_parser("list", parents=[common], help="list topics")
    p.add_argument("--exclude-internal", action="store_true")
    p = t.add_parser("describe", parents=[common], help="partitions and configs of topics")
    p.add_argument("topic", nargs="?")
    p = t.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, metavar="N", help="[the broker's default]")
    p.add_argument("--replication-factor", type=int, metavar="N", help="[the broker's default]")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a topic config; repeatable",
    )
    p = t.add_parser("delete", parents=[common], help="delete a topic")
    p.add_argument("topic")
    return root


async def run(args: argparse.Namespace) -> int:
    from . import groups, topics

    settings = load_settings(args.command_config)
    for address in args.bootstrap_server.split(","):
        split_address(address)
    admin = AdminClient(args.bootstrap_server, settings)
    try:
        if args.tool == "topics":
            command = {
                "list": topics.cmd_list,
                "describe": topics.cmd_describe,
                "create": topics.cmd_create,
                "delete": topics.cmd_delete,
            }[args.command]
            return await command(admin, args)
        if args.tool == "share-groups":
            from .share_groups import COMMANDS

            return await COMMANDS[args.command](admin, args)
        if args.command == "copy-offsets":
            target_settings: ClientSettings = (
                load_settings(args.to_command_config, "--to-command-config")
                if args.to_command_config
                else settings
            )
            for address in args.to.split(","):
                split_address(address)
            async with AdminClient(args.to, target_settings) as target:
                return await groups.cmd_copy_offsets(admin, target, args)
        command = {
            "list": groups.cmd_list,
            "describe": groups.cmd_describe,
            "delete": groups.cmd_delete,
            "delete-offsets": groups.cmd_delete_offsets,
            "reset-offsets": groups.cmd_reset_offsets,
        }[args.command]
        return await command(admin, args)
    finally:
        await admin.close()


async def amain(argv: Sequence[str]) -> int:
    """``argv`` starts with the tool's name (``groups``, ``share-groups`` or ``topics``); the
    exit code (bad
    flags exit 2 through argparse)."""
    from .groups import Failed

    args = build_parser().parse_args(list(argv))
    prog = f"kgroupd {args.tool} {args.command}"
    try:
        return await run(args)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, ConnectError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except Failed:
        return 1


def main(argv: Sequence[str]) -> int:
    return asyncio.run(amain(argv))
