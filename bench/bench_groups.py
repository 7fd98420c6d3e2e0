"""The group coordinator under load (issue 3): rebalance rounds, heartbeats/s, commits/s, and
100,000 groups, kgroupd against Tansu.

    python bench/bench_groups.py [--broker kgroupd|tansu|both] [--only CASE,...]

CASE is ``rebalance``, ``heartbeat``, ``commit`` or ``groups`` (default: all four).

The clients are raw asyncio connections (uvloop, ``asyncio.Protocol``) sending frames encoded
before the clock starts (``kgroupd.protocol.messages`` structs plus request header v1; per-round
fields such as the generation are patched into the bytes), so the client's cost stays small:
JoinGroup v1 (no MEMBER_ID_REQUIRED round trip), SyncGroup v1, Heartbeat v1, OffsetCommit v2.
kgroupd runs with ``--initial-rebalance-delay-ms 0``. Tansu cannot be told to skip its own
wait: a round there takes half the rebalance timeout plus ~1 s whatever the group size (16 s
with the default ``--session-ms 30000``, used as both session and rebalance timeout), so its
rounds are few (``--tansu-rounds``) and only up to ``--tansu-max-members`` members.

* rebalance: N members (one connection each, as real consumers) form a Stable group; then, per
  round, all N rejoin at once with a changed subscription (so every rejoin counts, whatever
  order the broker sees them in), the leader syncs the N assignments and the followers sync.
  Time from the first rejoin written to the last SyncGroup answer; median of the rounds.
  Targets: under 50 ms at 100 members, under 500 ms at 1000.
* heartbeat: a Stable group of ``--hb-connections`` members; each member heartbeats over its
  own connection with ``--window`` requests in flight, for ``--seconds`` per round.
  Target: at least 30,000/s.
* commit: OffsetCommit v2 of 8 partitions each, "simple" commits (generation -1, no member:
  the group has no members, as with manual assignment), one group per connection,
  ``--commit-connections`` x ``--window`` in flight. Target: at least 20,000/s in memory.
* groups: ``--groups`` single-member groups, each joined then synced (leader assigns itself),
  pipelined over ``--groups-connections`` connections; groups/s and the broker's RSS at the
  end. Target: RSS under 1 GiB. kgroupd only.

Every answer is checked (error codes, generations, member counts), so a broker that refuses
work cannot look fast. Load averages are printed with each table; the "broker CPU-µs per
request" column (broker CPU time over answers) moves less with background load than the rate.

``--py-spy DIR`` samples kgroupd during each case and prints where its time went.
``--in-process commit-1,commit-8,heartbeat,rebalance-N`` instead drives a KafkaServer in
this process without sockets (as profile_hotpath.py does) and prints the broker's CPU time
per request or per round (with ``--py-spy DIR``, its profile). Figures: BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h

# What bench_durability.py, bench_metrics.py and instructions.py use (as ``bg.<name>``);
# instructions.py also runs an older revision's own bench_groups.py, which defines them.
from groups_cases import CASE_FUNCS, Report, kgroupd_args, load, open_pipes, spread
from groups_in_process import _transport_class, in_process_main
from groups_pipes import COMMIT_PARTITIONS, Pipe, Rate, check_commit, measure
from groups_wire import Conn, Failure, commit_frame, connect_all

__all__ = [
    "COMMIT_PARTITIONS",
    "Conn",
    "Failure",
    "Pipe",
    "Rate",
    "_transport_class",
    "check_commit",
    "commit_frame",
    "connect_all",
    "kgroupd_args",
    "load",
    "measure",
    "open_pipes",
    "spread",
]

CASES = ("rebalance", "heartbeat", "commit", "groups")


async def main_async(
    args: argparse.Namespace, started: dict[str, h.BrokerProcess], rep: Report
) -> None:
    for case in args.only.split(","):
        print(f"# {case}", file=sys.stderr)
        spy = None
        if args.py_spy and "kgroupd" in started:
            out = Path(args.py_spy) / f"groups-{case}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            spy = h.py_spy_start(started["kgroupd"].pid, out)
        try:
            await CASE_FUNCS[case](args, started, rep)
        finally:
            h.py_spy_stop(spy)
        if spy is not None:
            rep.add("", f"py-spy profile of kgroupd during {case} ({out}):", "")
            rep.add(*(f"    {line}" for line in h.py_spy_summary(out)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(ap)
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated cases to run")
    ap.add_argument("--members", default="10,100,1000", help="rebalance group sizes")
    ap.add_argument("--rounds", type=int, default=7, help="kgroupd rebalance rounds")
    ap.add_argument("--tansu-rounds", type=int, default=3, help="Tansu rebalance rounds")
    ap.add_argument(
        "--tansu-max-members", type=int, default=100, help="larger groups are kgroupd only"
    )
    ap.add_argument(
        "--session-ms",
        type=int,
        default=30000,
        help="session and rebalance timeout (Tansu's round takes half the rebalance timeout)",
    )
    ap.add_argument("--hb-connections", type=int, default=10)
    ap.add_argument("--commit-connections", type=int, default=10)
    ap.add_argument("--window", type=int, default=16, help="requests in flight per connection")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per round")
    ap.add_argument("--pipe-rounds", type=int, default=5, help="heartbeat/commit rounds")
    ap.add_argument("--warmup", type=int, default=1, help="untimed heartbeat/commit rounds")
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--groups-connections", type=int, default=20)
    ap.add_argument("--groups-window", type=int, default=32)
    ap.add_argument("--groups-timeout", type=float, default=300.0)
    ap.add_argument(
        "--py-spy",
        metavar="DIR",
        help="profile kgroupd with py-spy during each case (raw stacks in DIR; slows it down)",
    )
    ap.add_argument(
        "--in-process",
        metavar="CASES",
        help="instead: drive the broker in this process without sockets and print its cost per"
        " request; comma-separated commit-1, commit-8, heartbeat, rebalance-N",
    )
    ap.add_argument("--in-process-requests", type=int, default=20000)
    ap.add_argument(
        "--no-metrics", action="store_true", help="--in-process: the broker with --no-metrics"
    )
    ap.add_argument("--in-process-rounds", type=int, default=15)
    args = ap.parse_args()
    if args.in_process:
        if args.kgroupd_rev and not os.environ.get(h.SRC_ENV):
            h.use_kgroupd_rev(args.kgroupd_rev)
            env = {**os.environ, h.SRC_ENV: str(h.KGROUPD_SRC)}
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
        in_process_main(args)
        return 0
    for case in args.only.split(","):
        if case not in CASES:
            ap.error(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    h.apply_common_args(args)
    kinds = h.kinds_for(args.broker)
    machine = h.machine()
    rep = Report()
    started: dict[str, h.BrokerProcess] = {}
    ok = False
    try:
        for kind in kinds:
            b = h.BrokerProcess(kind, extra=kgroupd_args() if kind == "kgroupd" else [])
            started[kind] = b.start()
        h.uvloop_run(main_async(args, started, rep))
        ok = True
    finally:
        for b in started.values():
            b.stop()
            if ok:
                b.cleanup_log()
    print(f"\n{h.command_line()}")
    print(f"{h.stamp()}; {machine}, {load():.2f} at the end; {h.kgroupd_revision()}")
    print("\n".join(rep.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
