"""``python -m kgroupd.pipeline --bootstrap-server HOST:PORT``: run the reference streaming job.

See ``kgroupd.pipeline.job``. With ``--available-now`` it reads what is on the topic, writes the
windows the watermark has closed, and exits; otherwise it runs until interrupted. It ends
with one JSON line on stdout: batches, records read, windows written, output and checkpoint.
A broker that cannot be reached (a Kafka ApiVersions round trip, 10 s) stops it before
Spark starts, with one line naming the address and exit code 1; a query that fails (data
the checkpoint expects is gone: see failOnDataLoss in docs/pyspark.md) ends with one line saying
why, after the summary, and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys

from pyspark.errors import StreamingQueryException

from kgroupd.pipeline.job import JobConfig, reachable, spark_session, start, summary


def parse(argv: list[str] | None = None) -> tuple[JobConfig, str]:
    parser = argparse.ArgumentParser(prog="python -m kgroupd.pipeline", description=__doc__)
    parser.add_argument("--bootstrap-server", required=True, help="HOST:PORT of the broker")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--group", default="kgroupd-pipeline", help="where progress is committed")
    parser.add_argument("--output", default="pipeline-out/window_counts", help="Parquet dir")
    parser.add_argument("--checkpoint", default="pipeline-out/checkpoint")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="30 seconds")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--trigger-interval", default="10 seconds")
    parser.add_argument(
        "--available-now", action="store_true", help="process what is there, then exit"
    )
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    config = JobConfig(
        bootstrap_server=args.bootstrap_server,
        topic=args.topic,
        group=args.group,
        output=args.output,
        checkpoint=args.checkpoint,
        window=args.window,
        watermark=args.watermark,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=args.available_now,
        trigger_interval=args.trigger_interval,
    )
    return config, args.master


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its connection chatter at exit
    config, master = parse(argv)
    # Fail fast (before Spark starts) when the broker cannot be reached, in one line.
    problem = reachable(config.bootstrap_server)
    if problem is not None:
        print(
            f"python -m kgroupd.pipeline: error: cannot reach the broker at "
            f"{config.bootstrap_server}: {problem}",
            file=sys.stderr,
        )
        return 1
    spark = spark_session(master)
    spark.sparkContext.setLogLevel("WARN")
    query = start(spark, config)
    logging.info("query %s started: %s -> %s", query.id, config.topic, config.output)
    failure = None
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    except StreamingQueryException as exc:
        failure = reason(exc)
    finally:
        # the run's summary: batches, records read, windows written, where
        print(json.dumps(summary(spark, query, config)), flush=True)
        spark.stop()
    if failure is not None:
        print(f"python -m kgroupd.pipeline: error: {failure}", file=sys.stderr)
        return 1
    return 0


def reason(exc: Exception) -> str:
    """The one line that says why the query stopped: the source's data-loss message when that
    is why (Spark wraps it in the Python traceback of the task or driver call)."""
    text = str(exc)
    found = re.search(r"DataLossError: (.+)", text)
    if found:
        return found.group(1).strip()
    return next((line.strip() for line in text.splitlines() if line.strip()), repr(exc))


if __name__ == "__main__":
    raise SystemExit(main())
