"""Metadata answers from encoded parts: each topic's entry is encoded once per version and
kept until the topic changes, so a Metadata request for every topic at 100,000 partitions
copies bytes instead of building and encoding 100,000 partition dicts (issue 26).

A topic's entry is made by ``metadata.topic_entry`` and encoded by the protocol codec (the
topic struct of ``MetadataResponse``), so the bytes are exactly what the whole-answer codec
writes. They are kept per topic name with the ``Topic`` object, its partition count and the
broker's node id they were made for; a recreated topic (a new object), added partitions or
another node id make them again. Entries that are not a plain topic (errors, the
transaction coordinator's topic) are encoded per request. The answer's fields before and
after the topics array are encoded by the codec with no topic and the array spliced in
between (``assemble``).

A request whose topics are not yet encoded with more than ``SLICE_PARTITIONS`` partitions
among them is answered by a coroutine that encodes them topic by topic, giving the event
loop back between topics, so no Metadata request holds it for long.
"""

from __future__ import annotations

import asyncio
import struct
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kgroupd.protocol.codec import Message
from kgroupd.protocol.fast import Chunks
from kgroupd.protocol.schemas.metadata import METADATA_RESPONSE
from kgroupd.protocol.types import write_uvarint

if TYPE_CHECKING:
    from kgroupd.broker.handlers.registry import RequestContext
    from kgroupd.broker.log.topics import Topic

Fields = dict[str, Any]
# An answer's topic entry: a topic and its authorized operations (encoded from the cache),
# or the entry's fields (an error, the transaction coordinator's topic)
Entry = tuple["Topic", int] | Fields
EntryOf = Callable[["RequestContext", "Topic", int], Fields]

# Encoded at once up to this many partitions not yet cached; beyond, in slices of about
# as many (a topic at a time).
SLICE_PARTITIONS = 5_000

_TOPIC_FIELDS = next(f for f in METADATA_RESPONSE.fields if f.name == "topics").type
assert isinstance(_TOPIC_FIELDS, list)
# The topic struct as a message of its own: the codec writes it as it writes it nested.
TOPIC = Message("MetadataResponseTopic", 3, "0-13", "9+", _TOPIC_FIELDS)
_I32 = struct.Struct(">i")


_PARTITION_FIELDS = next(f for f in _TOPIC_FIELDS if f.name == "partitions").type
assert isinstance(_PARTITION_FIELDS, list)
PARTITION = Message("MetadataResponsePartition", 3, "0-13", "9+", _PARTITION_FIELDS)
_PARTITION_KEYS = 7  # the fields of a partition entry (one more: encoded by the codec alone)


def encode_entry(entry: Fields, version: int) -> bytes:
    """One topic entry of the answer (``topics[i]``), as the codec writes it. Its partitions
    are encoded once per distinct entry (leader, replicas...) with the index spliced in."""
    codec = TOPIC.codec(version)
    partitions = entry.get("partitions")
    if not partitions or len(partitions) < 16:
        return codec.encode(entry)
    flexible = version >= 9
    empty = codec.encode({**entry, "partitions": []})
    # after the partitions: topic_authorized_operations (v8+), the tagged fields (flexible)
    split = len(empty) - (4 if version >= 8 else 0) - (1 if flexible else 0)
    out = bytearray(empty[: split - (1 if flexible else 4)])
    if flexible:
        write_uvarint(len(partitions) + 1, out)
    else:
        out += _I32.pack(len(partitions))
    one = PARTITION.codec(version)
    pack = _I32.pack
    made: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
    for p in partitions:
        if len(p) != _PARTITION_KEYS:
            out += one.encode(p)
            continue
        key = (
            p["error_code"],
            p["leader_id"],
            p.get("leader_epoch"),
            tuple(p["replica_nodes"]),
            tuple(p["isr_nodes"]),
            tuple(p.get("offline_replicas") or ()),
        )
        found = made.get(key)
        if found is None:
            encoded_one = one.encode({**p, "partition_index": 0})
            found = made[key] = (encoded_one[:2], encoded_one[6:])  # error_code | index | rest
        out += found[0]
        out += pack(p["partition_index"])
        out += found[1]
    out += empty[split:]
    return bytes(out)


@dataclass
class _Cached:
    topic: Topic
    count: int
    node: int
    parts: dict[tuple[int, int, bool], bytes] = field(default_factory=dict)


class MetadataParts:
    """Encoded topic entries, per topic name and (version, authorized operations, internal)."""

    def __init__(self) -> None:
        self._topics: dict[str, _Cached] = {}
        self._version = -1  # TopicManager.version last pruned at

    def get(self, topic: Topic, node: int, key: tuple[int, int, bool]) -> bytes | None:
        cached = self._topics.get(topic.name)
        if cached is None or not _valid(cached, topic, node):
            return None
        return cached.parts.get(key)

    def put(self, topic: Topic, node: int, key: tuple[int, int, bool], part: bytes) -> None:
        cached = self._topics.get(topic.name)
        if cached is None or not _valid(cached, topic, node):
            cached = self._topics[topic.name] = _Cached(topic, len(topic.partitions), node)
        cached.parts[key] = part

    def prune(self, version: int, alive: Callable[[str], bool]) -> None:
        """After topics changed (``TopicManager.version``): forget the deleted ones."""
        if version == self._version:
            return
        self._version = version
        for name in [n for n in self._topics if not alive(n)]:
            del self._topics[name]

    def clear(self) -> None:
        self._topics.clear()


def _valid(cached: _Cached, topic: Topic, node: int) -> bool:
    return cached.topic is topic and cached.count == len(topic.partitions) and cached.node == node


def assemble(response: Fields, version: int, parts: list[bytes]) -> Chunks:
    """The answer's body: ``response`` (every field but ``topics``) encoded by the codec,
    with ``parts`` (encoded topic entries) as its topics array."""
    empty = METADATA_RESPONSE.codec(version).encode({**response, "topics": []})
    flexible = version >= 9
    # after the topics array: cluster_authorized_operations (v8-10), error_code (v13+),
    # the tagged fields (flexible)
    tail = (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if flexible else 0)
    count = 1 if flexible else 4  # an empty array's length
    split = len(empty) - tail
    head = empty[: split - count]
    length = bytearray()
    if flexible:
        write_uvarint(len(parts) + 1, length)
    else:
        length += _I32.pack(len(parts))
    body = Chunks([head, bytes(length)])
    body.extend(parts)
    body.append(empty[split:])
    return body


# one cache per broker (the state a handler reaches)
_CACHES: weakref.WeakKeyDictionary[Any, MetadataParts] = weakref.WeakKeyDictionary()


def parts_of(broker: Any) -> MetadataParts:
    cache = _CACHES.get(broker)
    if cache is None:
        cache = _CACHES[broker] = MetadataParts()
    return cache


def encoded(
    ctx: RequestContext, response: Fields, entries: list[Entry], entry_of: EntryOf
) -> Chunks | Awaitable[Chunks]:
    """The answer ``response`` with ``entries`` as its topics: the cached encoding of each
    topic, the others encoded now (in slices when many partitions are)."""
    broker = ctx.broker
    topics = broker.topics
    cache = parts_of(broker)
    cache.prune(topics.version, lambda n: n in topics.topics or n in topics.internal)
    version, node, internal = ctx.api_version, broker.node_id, topics.internal
    parts: list[bytes] = []
    pending: list[tuple[int, int, Callable[[], bytes]]] = []
    missing = 0
    for entry in entries:
        if isinstance(entry, tuple):
            topic, ops = entry
            key = (version, ops, topic.name in internal)
            part = cache.get(topic, node, key)
            if part is None:
                n = len(topic.partitions)
                pending.append((len(parts), n, _maker(ctx, cache, entry_of, topic, ops, key)))
                missing += n
                part = b""
            parts.append(part)
        else:
            parts.append(encode_entry(entry, version))
    if missing <= SLICE_PARTITIONS:
        for index, _n, make in pending:
            parts[index] = make()
        return assemble(response, version, parts)
    return _in_slices(pending, parts, lambda: assemble(response, version, parts))


def _maker(
    ctx: RequestContext,
    cache: MetadataParts,
    entry_of: EntryOf,
    topic: Topic,
    ops: int,
    key: tuple[int, int, bool],
) -> Callable[[], bytes]:
    def make() -> bytes:
        part = encode_entry(entry_of(ctx, topic, ops), ctx.api_version)
        cache.put(topic, ctx.broker.node_id, key, part)
        return part

    return make


async def _in_slices(
    pending: list[tuple[int, int, Callable[[], bytes]]],
    parts: list[bytes],
    finish: Callable[[], Chunks],
) -> Chunks:
    """Encode ``pending`` (index in ``parts``, partitions, how), giving the event loop back
    after every ``SLICE_PARTITIONS`` partitions or so (a topic at a time); then the answer."""
    done = 0
    for index, n, make in pending:
        if done and done + n > SLICE_PARTITIONS:
            done = 0
            await asyncio.sleep(0)
        parts[index] = make()
        done += n
    return finish()
