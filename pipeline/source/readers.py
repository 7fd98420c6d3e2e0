"""The PySpark data source "kgroupd" and its batch and stream readers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from kgroupd.pipeline.source.cluster import ClusterFacts
from kgroupd.pipeline.source.kafka import KafkaAdmin
from kgroupd.pipeline.source.options import (
    TP,
    DataLossError,
    Offsets,
    SourceOptions,
    _bool,
    from_json,
    kafka_schema,
    limit_rows,
    log,
    meta_of,
    to_json,
)
from kgroupd.pipeline.source.ranges import OffsetRange, plan, read_range, resolve


class KgroupdDataSource(DataSource):
    """``spark.dataSource.register(KgroupdDataSource)``, then ``format("kgroupd")``."""

    @classmethod
    def name(cls) -> str:
        return "kgroupd"

    def schema(self) -> StructType:
        return kafka_schema(_bool(_lower(self.options), "includeheaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KgroupdBatchReader(SourceOptions.parse(self.options, batch=True))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KgroupdStreamReader(SourceOptions.parse(self.options))


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


class KgroupdBatchReader(DataSourceReader):
    """``spark.read.format("kgroupd")``: the records between startingOffsets (default
    earliest) and endingOffsets (default latest), as they are when the query is planned."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        admin = KafkaAdmin(self.opts)
        try:
            existing = admin.partitions()
            tps = existing
            if isinstance(self.opts.starting, dict):
                tps = sorted(set(tps) | set(self.opts.starting))
            earliest, latest = admin.offsets(existing)
        finally:
            admin.close()
        missing = [tp for tp in tps if tp not in latest]
        if missing:
            message = f"partitions {missing} named in startingOffsets do not exist"
            if self.opts.fail_on_data_loss:
                raise DataLossError(message)
            log.warning(message)
            tps = [tp for tp in tps if tp in latest]
        start = resolve(self.opts.starting, tps, earliest, latest, "startingOffsets")
        end = resolve(self.opts.ending, tps, earliest, latest, "endingOffsets")
        return plan(start, end, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition, self.opts)


class KgroupdStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kgroupd")``.

    Offsets are ``{"topic": {"partition": next offset to read}}``. With ``group.id``, the
    offsets of every finished batch are committed to that group: in ``commit(end)``, and for
    the ``start`` Spark hands to ``latestOffset`` (the end of the last batch it recorded as
    done), so an availableNow run's final call commits its last batch.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: KafkaAdmin | None = None
        self._target: Offsets | None = None  # availableNow: read no further than this
        self._latest: Offsets | None = None  # the broker's latest, for reportLatestOffset
        self._committed: Offsets | None = None

    # The reader is pickled to the executors: they get the options only.
    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = KafkaAdmin(self.opts)
        return self._admin

    def initialOffset(self) -> dict[str, Any]:
        tps = self.admin.partitions()
        if isinstance(self.opts.starting, dict):
            absent = sorted(set(self.opts.starting) - set(tps))
            if absent:
                raise ValueError(f"startingOffsets names partitions that do not exist: {absent}")
        earliest, latest = self.admin.offsets(tps)
        start = resolve(self.opts.starting, tps, earliest, latest, "startingOffsets")
        return to_json(start, _meta(self.admin.facts([t for t, _ in tps])))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.admin.partitions()
        self._target = self.admin.offsets(tps)[1]

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        tps = self.admin.partitions()
        lost = sorted(set(begin) - set(tps))
        if lost:
            message = (
                f"partitions {lost} are gone (topic deleted?); records not yet read from "
                "them are lost"
            )
            if self.opts.fail_on_data_loss:
                raise DataLossError(message + " (set failOnDataLoss=false to go on without them)")
            log.warning(message)
        earliest, latest = self.admin.offsets(tps)
        facts = self.admin.facts(sorted({t for t, _ in tps} | {t for t, _ in begin}))
        changed = _changed(begin, meta_of(start), facts, earliest, latest)
        if changed:
            message = "; ".join(changed.values())
            if self.opts.fail_on_data_loss:
                raise DataLossError(
                    message + " (set failOnDataLoss=false to read these partitions again from "
                    "their earliest offsets)"
                )
            log.warning(message + "; reading these partitions again from their earliest offsets")
        resumed = {tp: earliest[tp] for tp in changed}
        self._commit_progress({tp: o for tp, o in begin.items() if tp not in changed}, set(tps))
        base = {**begin, **resumed}  # where this batch starts
        self._latest = dict(latest)
        end = dict(latest)
        if self._target is not None:
            # availableNow: nothing produced after the run started is read; partitions
            # created since are left for the next run.
            end = {tp: min(o, self._target[tp]) for tp, o in end.items() if tp in self._target}
            for tp in base.keys() & end.keys():
                if latest[tp] >= base[tp]:
                    end[tp] = max(end[tp], base[tp])
        if isinstance(limit, ReadMaxRows):
            end = limit_rows({tp: o for tp, o in base.items() if tp in end}, end, limit.max_rows)
        return to_json(end, _meta(facts, resumed))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        # Partitions whose checkpoint offsets referred to another log (failOnDataLoss=false)
        # start where latestOffset said, recorded in the end offsets so a replay plans the same.
        begin.update(from_json(meta_of(end).get("resumed", {})))
        # An offset that went back reads nothing this batch. failOnDataLoss=true already
        # failed in latestOffset.
        return plan(begin, stop, dataclasses.replace(self.opts, fail_on_data_loss=False))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        return read_range(partition, self.opts)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_progress(from_json(end))

    def _commit_progress(self, offsets: Offsets, existing: set[TP] | None = None) -> None:
        group = self.opts.group_id
        if group is None or not offsets or offsets == self._committed:
            return
        if existing is None:
            existing = set(self.admin.partitions())
        present = {tp: o for tp, o in offsets.items() if tp in existing}
        self.admin.commit(group, present)
        self._committed = dict(offsets)

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def _meta(facts: ClusterFacts, resumed: Offsets | None = None) -> dict[str, Any]:
    """The offsets JSON's note of which log its offsets refer to."""
    meta: dict[str, Any] = {}
    if facts.cluster_id is not None:
        meta["cluster_id"] = facts.cluster_id
    if facts.topic_ids:
        meta["topic_ids"] = dict(sorted(facts.topic_ids.items()))
    if resumed:
        meta["resumed"] = to_json(resumed)
    return meta


def _changed(
    begin: Offsets,
    meta: Mapping[str, Any],
    facts: ClusterFacts,
    earliest: Offsets,
    latest: Offsets,
) -> dict[TP, str]:
    """The partitions whose checkpoint offsets no longer refer to the broker's log, each with
    why: another cluster id, another topic id, or an offset beyond the log end."""
    old_cluster = meta.get("cluster_id")
    old_ids = meta.get("topic_ids") or {}
    out = {}
    for tp, offset in sorted(begin.items()):
        if tp not in latest:
            continue  # gone: reported on its own
        topic = tp[0]
        where = f"{topic}-{tp[1]} (checkpoint offset {offset})"
        now = f"the broker's offsets are {earliest[tp]} to {latest[tp]}"
        new_id = facts.topic_ids.get(topic)
        if old_cluster and facts.cluster_id and old_cluster != facts.cluster_id:
            out[tp] = (
                f"{where}: the checkpoint was read from cluster {old_cluster} but the broker "
                f"is cluster {facts.cluster_id} (restarted without its data?); {now}"
            )
        elif old_ids.get(topic) and new_id and old_ids[topic] != new_id:
            out[tp] = (
                f"{where}: topic {topic} had id {old_ids[topic]} and now has {new_id} "
                f"(deleted and created again); {now}"
            )
        elif offset > latest[tp]:
            out[tp] = f"{where}: beyond the log end; {now} (topic deleted and created again?)"
    return out
