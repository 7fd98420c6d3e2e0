"""The connections of a simulated node (``--nodes N``, N > 1; the model is
``kgroupd.broker.nodes``).

With N > 1 the server makes ``NodeConnection``s (each knows its node, set at accept) in place
of ``KafkaConnection``s; with one node (the default) none of this is imported and a request
pays nothing for it. Before a request goes to the usual dispatch, ``NodeConnection`` checks
the APIs a real cluster routes:

- to a partition's leader (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords,
  DescribeProducers): a partition this node does not lead is NOT_LEADER_OR_FOLLOWER (with the
  current leader where the version has the field, KIP-951); a current leader epoch below the
  partition's is FENCED_LEADER_EPOCH, above it UNKNOWN_LEADER_EPOCH. A Fetch answers the
  partitions it may serve with no records this time (their offsets as they are), the others
  with their error; Produce, ListOffsets, OffsetForLeaderEpoch, DeleteRecords and
  DescribeProducers send the partitions it may serve on to the handler and add the others'
  errors to its answer (``Amend``; a Produce's with their leader and its ``node_endpoints``;
  with acks=0 the partitions it leads are appended, nothing is answered and the connection
  closes, as Kafka closes it so that the producer refreshes its metadata). A request that
  passes goes on as usual; where it names a leader epoch the handlers (which know only epoch
  0) see none.
- to a group's coordinator (the classic, KIP-848 and share group APIs, offsets,
  TxnOffsetCommit, the share-group offsets): a group this node does not coordinate is
  NOT_COORDINATOR, for the whole request. ListGroups lists the groups this node coordinates.
- ShareFetch / ShareAcknowledge: ``kgroupd.broker.net.node_routing`` (a share session per
  node, the partitions led elsewhere refused).

A long-poll Fetch or ShareFetch, a JoinGroup or SyncGroup parked on a node is looked at again
when leaderships move (``Nodes.parked``) and answered at once with its refusal if the node no
longer leads its partitions or coordinates its group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from kgroupd.broker.net.connection import ConnectionHost, KafkaConnection, _Close
from kgroupd.broker.net.node_routing import PASS_REWRITTEN, Amend, share_check, share_parked
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.fast.common import Chunks
from kgroupd.protocol.framing import (
    FrameError,
    encode_response,
    parse_request_header,
    peek_api,
    read_uvarint,
)
from kgroupd.protocol.messages import MessageSpec, lookup

if TYPE_CHECKING:
    from kgroupd.broker.config.listeners import Listener
    from kgroupd.broker.nodes import Nodes
    from kgroupd.broker.state import Broker

__all__ = ["NodeConnection", "attach_nodes", "close_node", "listen_nodes", "node_factory"]

log = structlog.get_logger("kgroupd.server")
Fields = dict[str, Any]


class NodesHost(ConnectionHost, Protocol):
    """What the nodes need of the server (``KafkaServer``)."""

    _servers: list[Any]

    async def _listen(self, listener: Listener, node: int = 0) -> Any: ...


NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR
LIST_GROUPS = 16


class NodeConnection(KafkaConnection):
    """A connection to one of the simulated nodes."""

    def __init__(
        self,
        server: ConnectionHost,
        advertised: tuple[str, int] | None,
        protocol: str,
        node_id: int,
        nodes: Nodes,
    ) -> None:
        super().__init__(server, advertised, protocol)
        self.node_id = node_id
        self.nodes = nodes
        self.log = self.log.bind(node=node_id)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.node_id in self.nodes.down:  # a node that is down takes no connection
            self.closing = True
            transport.close()
            return
        super().connection_made(transport)

    def _dispatch(self, frame: bytes | bytearray) -> Any:
        sasl = self.sasl
        if sasl is None or (sasl.principal is not None and not sasl.raw_tokens):
            try:
                api_key, version, corr = peek_api(frame)
            except FrameError:
                return super()._dispatch(frame)
            check = _CHECKS.get(api_key)
            spec = lookup(api_key, version) if check is not None else None
            if check is not None and spec is not None:
                group = None
                try:
                    header = parse_request_header(frame, spec.flexible)
                    if api_key in _GROUP_FIRST or (api_key == 9 and version < 8):
                        group = _first_string(frame, header.body_offset, spec.flexible)
                        if self.nodes.coordinator(0, group) != self.node_id:
                            group = None  # decoded below, to be refused
                    if group is None:
                        request = spec.decode_request(frame, header.body_offset)
                except Exception:
                    return super()._dispatch(frame)  # it closes the connection as usual
                if group is not None:  # this node's group: on without decoding it here
                    return self._passed(frame, api_key, {"group_id": group})
                answer = check(self, spec, request)
                if isinstance(answer, Amend) or answer is PASS_REWRITTEN:
                    frame = frame[: header.body_offset] + spec.encode_request(request)
                elif answer is not None:
                    self.log.info("node_refused", api_key=api_key, node=self.node_id)
                    if answer is _UNANSWERED:
                        raise _Close(_ACKS0_REFUSED)
                    return encode_response(corr, answer, spec.response_header_v1)
                result = super()._dispatch(frame)
                if isinstance(answer, Amend):
                    if api_key == 0 and request.get("acks") == 0:
                        return self._closing_after(result)
                    result = _amended(result, spec, corr, answer.fix)
                recheck = _PARKS.get(api_key)
                if recheck is not None and type(result) is tuple:
                    awaitable, spec, corr = result
                    if isinstance(answer, Amend):  # a refusal names what the check took out too
                        recheck = _fixing(recheck, answer.fix)
                    return self._parked(awaitable, spec, request, recheck), spec, corr
                return result
            elif api_key == LIST_GROUPS:
                return self._own_groups(super()._dispatch(frame), version, corr)
        return super()._dispatch(frame)

    def _closing_after(self, result: Any) -> Any:
        """An acks=0 Produce with partitions refused: closed once its own are appended (as
        Kafka closes it, so that the producer refreshes its metadata)."""
        if type(result) is not tuple:
            raise _Close(_ACKS0_REFUSED)
        awaitable, spec, corr = result

        async def then_close() -> None:
            await awaitable
            self._close(_ACKS0_REFUSED)

        return then_close(), spec, corr

    def _passed(self, frame: bytes | bytearray, api_key: int, request: Fields) -> Any:
        """A group request for a group this node coordinates: the usual dispatch (parked
        JoinGroup and SyncGroup watched for the group moving away)."""
        result = super()._dispatch(frame)
        recheck = _PARKS.get(api_key)
        if recheck is not None and type(result) is tuple:
            awaitable, spec, corr = result
            return self._parked(awaitable, spec, request, recheck), spec, corr
        return result

    async def _parked(
        self, awaitable: Awaitable[Any], spec: MessageSpec, request: Fields, check: Check
    ) -> Any:
        """A request parked on this node (a long-poll Fetch or ShareFetch, a JoinGroup or
        SyncGroup waiting for the rebalance): answered at once with its refusal when
        leaderships move so that this node no longer leads its partitions or coordinates its
        group, as Kafka completes such requests when a broker resigns."""
        task = asyncio.ensure_future(awaitable)
        parked = self.nodes.parked
        try:
            while True:
                moved: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                parked.add(moved)
                try:
                    await asyncio.wait((task, moved), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    parked.discard(moved)
                if task.done():
                    return task.result()
                refused = check(self, spec, request)
                if refused is not None and type(refused) is bytes and refused != PASS_REWRITTEN:
                    self.log.info("node_refused_parked", api_key=spec.api_key, node=self.node_id)
                    return refused
        finally:
            if not task.done():
                task.cancel()

    def _own_groups(self, answer: Any, version: int, corr: int) -> Any:
        """ListGroups: the groups this node coordinates (a client asks every node)."""
        spec = lookup(LIST_GROUPS, version)
        if type(answer) is not bytes or spec is None:
            return answer
        start = 9 if spec.response_header_v1 else 8  # size, correlation id, tagged fields
        body = spec.decode_response(answer, start)
        mine = self.node_id
        body["groups"] = [
            g for g in body["groups"] if self.nodes.coordinator(0, g["group_id"]) == mine
        ]
        return encode_response(corr, spec.encode_response(body), spec.response_header_v1)


def attach_nodes(server: NodesHost, broker: Broker) -> Nodes:
    """``broker.nodes`` for ``--nodes N``; a node that goes down has its connections closed."""
    from kgroupd.broker.nodes import Nodes

    config = broker.config
    topics = broker.topics
    nodes = Nodes(
        config.node_id,
        config.nodes,
        config.offsets_partitions,
        config.transaction_partitions,
        lambda: [(name, len(t.partitions)) for name, t in topics.topics.items()],
    )
    nodes.on_down.append(lambda node_id: close_node(server.connections, node_id))
    nodes.on_moved.append(lambda: _wake(nodes.parked))
    broker.nodes = nodes
    return nodes


def node_factory(
    server: NodesHost, listener: Listener, nodes: Nodes, k: int
) -> Callable[[], KafkaConnection]:
    """The connections accepted on the ``k``-th node's port of ``listener``."""
    node_id = nodes.ids[k]

    def connection() -> KafkaConnection:
        row = nodes.endpoints.get(listener.name)
        advertised = row[k] if row is not None and row[k][1] >= 0 else None
        return NodeConnection(server, advertised, listener.protocol, node_id, nodes)

    return connection


async def listen_nodes(server: NodesHost, listener: Listener, port: int) -> None:
    """The other nodes' ports of ``listener`` (its first node's is bound on ``port``): the
    next ports after it, or free ports when it was given as 0; advertised as the first node's
    advertised port plus the node's index when one is set, else as bound."""
    from dataclasses import replace

    from kgroupd.broker.config.listeners import advertised_address

    nodes = server.broker.nodes
    assert nodes is not None
    nodes.add_endpoint(listener.name, nodes.ids[0], advertised_address(listener, port))
    for k in range(1, len(nodes.ids)):
        want = listener.port + k if listener.port else 0
        advertised = listener.advertised_port + k if listener.advertised_port else None
        mine = replace(listener, port=want, advertised_port=advertised)
        bound = await server._listen(mine, k)
        server._servers.append(bound)
        bound_port = bound.sockets[0].getsockname()[1]
        address = advertised_address(mine, bound_port)
        nodes.add_endpoint(listener.name, nodes.ids[k], address)
        log.info(
            "listening",
            listener=listener.name,
            host=listener.host,
            port=bound_port,
            advertised=f"{address[0]}:{address[1]}",
            node_id=nodes.ids[k],
        )


def _wake(parked: set[asyncio.Future[None]]) -> None:
    """Leaderships moved: the requests parked on every node look again at what they wait for."""
    for fut in list(parked):
        if not fut.done():
            fut.set_result(None)


def _amended(result: Any, spec: MessageSpec, corr: int, fix: Callable[[Fields], None]) -> Any:
    """The usual dispatch's ``result``, its response's fields passed through ``fix``: now
    (a framed answer, hand-encoded buffers such as ShareFetch's, one held for an fsync) or
    when a parked request is answered."""
    if type(result) is Chunks:  # a hand-encoded answer, framed: decoded like any other
        result = b"".join(result)
    if type(result) is bytes:
        start = 9 if spec.response_header_v1 else 8  # size, correlation id, tagged fields
        body = spec.decode_response(result, start)
        fix(body)
        return encode_response(corr, spec.encode_response(body), spec.response_header_v1)
    if type(result) is tuple:
        awaitable, spec, corr = result
        return _amended_later(awaitable, spec, fix), spec, corr
    framed = getattr(result, "framed", None)  # an answer held until an fsync
    if type(framed) is list and len(framed) == 1 and type(framed[0]) is bytes:
        framed[0] = _amended(framed[0], spec, corr, fix)
    return result


def _fixing(check: Check, fix: Callable[[Fields], None]) -> Check:
    """``check`` of a parked request whose refusal (a response body) is passed through
    ``fix``, as its answer would have been."""

    def fixed(conn: NodeConnection, spec: MessageSpec, req: Fields) -> bytes | Amend | None:
        refused = check(conn, spec, req)
        if type(refused) is not bytes or refused == PASS_REWRITTEN:
            return refused
        body = spec.decode_response(refused, 0)
        fix(body)
        return spec.encode_response(body)

    return fixed


async def _amended_later(
    awaitable: Awaitable[Any], spec: MessageSpec, fix: Callable[[Fields], None]
) -> Any:
    reply = await awaitable
    if type(reply) is dict:
        fix(reply)
    elif type(reply) is bytes or type(reply) is Chunks:  # Chunks: a hand-encoded answer
        body = spec.decode_response(b"".join(reply) if isinstance(reply, Chunks) else reply, 0)
        fix(body)
        reply = spec.encode_response(body)
    return reply


def close_node(connections: set[KafkaConnection], node_id: int) -> None:
    """Close every connection of a node that went down."""
    for conn in list(connections):
        if isinstance(conn, NodeConnection) and conn.node_id == node_id:
            conn._close(f"node {node_id} is down (test controls)", error=False)


# --- partitions: routed to their leader ----------------------------------------------------

_UNANSWERED = b""  # a marker: acks=0, nothing to answer (the connection closes)
_ACKS0_REFUSED = "an acks=0 Produce named partitions this node does not lead"

# api key -> (request: topics, name, partitions, index; response: the same four); a request
# index of None: the partitions are their indexes
_LAYOUT: dict[int, tuple[tuple[str, str, str, str | None], tuple[str, str, str, str]]] = {
    0: (
        ("topic_data", "name", "partition_data", "index"),
        ("responses", "name", "partition_responses", "index"),
    ),
    1: (
        ("topics", "topic", "partitions", "partition"),
        ("responses", "topic", "partitions", "partition_index"),
    ),
    2: (
        ("topics", "name", "partitions", "partition_index"),
        ("topics", "name", "partitions", "partition_index"),
    ),
    21: (
        ("topics", "name", "partitions", "partition_index"),
        ("topics", "name", "partitions", "partition_index"),
    ),
    23: (
        ("topics", "topic", "partitions", "partition"),
        ("topics", "topic", "partitions", "partition"),
    ),
    61: (
        ("topics", "name", "partition_indexes", None),
        ("topics", "name", "partitions", "partition_index"),
    ),
}
# what a refused partition's entry carries besides its index and error
_REFUSED: dict[int, Fields] = {
    0: {"base_offset": -1, "record_errors": []},
    1: {"high_watermark": -1, "records": b"", "aborted_transactions": None},
    2: {"timestamp": -1, "offset": -1, "leader_epoch": -1},
    21: {"low_watermark": -1},
    23: {"leader_epoch": -1, "end_offset": -1},
    61: {"error_message": None, "active_producers": []},
}
# answered per partition: the partitions this node may serve go on to the handler
_SPLIT = frozenset((0, 2, 21, 23, 61))

Refusal = tuple[ErrorCode, int, int]  # the error, the current leader, its epoch


def _partitions(conn: NodeConnection, spec: MessageSpec, req: Fields) -> bytes | Amend | None:
    nodes = conn.nodes
    topics = conn.broker.topics
    api_key = spec.api_key
    (r_topics, r_name, r_parts, r_index), (a_topics, a_name, a_parts, a_index) = _LAYOUT[api_key]
    errors: dict[tuple[int, int], Refusal] = {}  # (topic#, index) -> its refusal
    epochs = False
    names: list[str | None] = []
    for ti, t in enumerate(req[r_topics]):
        name = t.get(r_name) or None  # absent from v13 of Produce and Fetch: by id
        if name is None and t.get("topic_id") is not None:
            found = topics.by_id(t["topic_id"])
            name = found.name if found is not None else None
        names.append(name)
        if name is None:
            continue  # an unknown topic: the handler answers it
        for p in t[r_parts]:
            index = p if r_index is None else p[r_index]
            leader = nodes.leader(index)
            epoch = nodes.epoch(name, index)
            current = -1 if r_index is None else p.get("current_leader_epoch", -1)
            if leader != conn.node_id:
                errors[ti, index] = (NOT_LEADER, leader, epoch)
            elif current >= 0 and current != epoch:
                code = (
                    ErrorCode.FENCED_LEADER_EPOCH
                    if current < epoch
                    else ErrorCode.UNKNOWN_LEADER_EPOCH
                )
                errors[ti, index] = (code, leader, epoch)
            elif current > 0:
                epochs = True
    if epochs:  # the handlers know only epoch 0
        for t in req[r_topics]:
            for p in t[r_parts]:
                if r_index is not None:
                    p["current_leader_epoch"] = -1
    if not errors:
        return PASS_REWRITTEN if epochs else None
    if api_key in _SPLIT and len(errors) < sum(len(t[r_parts]) for t in req[r_topics]):
        return _split(conn, spec, req, errors, names)
    if api_key == 0 and req.get("acks") == 0:
        return _UNANSWERED
    leaders: set[int] = set()
    out = []
    for ti, t in enumerate(req[r_topics]):
        name = names[ti]
        entries = []
        for p in t[r_parts]:
            index = p if r_index is None else p[r_index]
            refused = errors.get((ti, index))
            code, leader, epoch = refused or (NOT_LEADER, -1, 0)
            entry: Fields = {a_index: index, "error_code": int(code), **_REFUSED[api_key]}
            if api_key == 1 and refused is None and name is not None:
                log = topics.partition(name, index)
                if log is not None:  # served here: no records this time
                    entry.update(
                        error_code=0,
                        high_watermark=log.high_watermark,
                        last_stable_offset=log.last_stable_offset,
                        log_start_offset=log.log_start_offset,
                    )
            if api_key in (0, 1) and code is NOT_LEADER and leader >= 0:
                entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
                leaders.add(leader)
            entries.append(entry)
        out.append({a_name: t.get(r_name), "topic_id": t.get("topic_id"), a_parts: entries})
    answer: Fields = {a_topics: out}
    if api_key in (0, 1):
        answer["node_endpoints"] = [
            {"node_id": n, "host": h, "port": port, "rack": None}
            for n, h, port in nodes.brokers(conn.advertised)
            if n in leaders
        ]
    return spec.encode_response(answer)


def _split(
    conn: NodeConnection,
    spec: MessageSpec,
    req: Fields,
    errors: dict[tuple[int, int], Refusal],
    names: list[str | None],
) -> Amend:
    """The partitions this node may serve go on to the handler; the others are added to its
    answer with their errors (as a Kafka broker answers each partition of these requests)."""
    api_key = spec.api_key
    (r_topics, r_name, r_parts, r_index), (a_topics, a_name, a_parts, a_index) = _LAYOUT[api_key]
    # a topic's key in the answer: its name, or its id where the request names it by id
    refused: list[tuple[Any, str | None, Any, Fields]] = []
    leaders: set[int] = set()
    kept = []
    for ti, t in enumerate(req[r_topics]):
        mine = []
        for p in t[r_parts]:
            index = p if r_index is None else p[r_index]
            found = errors.get((ti, index))
            if found is None:
                mine.append(p)
                continue
            code, leader, epoch = found
            entry = {a_index: index, "error_code": int(code), **_REFUSED[api_key]}
            if api_key == 0 and code is NOT_LEADER and leader >= 0:  # KIP-951
                entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
                leaders.add(leader)
            name = t.get(r_name) or None
            key = name if name is not None else t.get("topic_id")
            refused.append((key, names[ti], t.get("topic_id"), entry))
        if mine:
            t[r_parts] = mine
            kept.append(t)
    req[r_topics] = kept
    endpoints = [
        {"node_id": n, "host": h, "port": port, "rack": None}
        for n, h, port in conn.nodes.brokers(conn.advertised)
        if n in leaders
    ]

    def fix(body: Fields) -> None:
        out = body.setdefault(a_topics, [])
        by_key = {(t.get(a_name) or t.get("topic_id")): t for t in out}
        for key, name, tid, entry in refused:
            topic = by_key.get(key)
            if topic is None:
                topic = by_key[key] = {a_name: name, "topic_id": tid, a_parts: []}
                out.append(topic)
            topic[a_parts].append(entry)
        if endpoints:
            listed = body.get("node_endpoints") or []
            have = {e["node_id"] for e in listed}
            body["node_endpoints"] = listed + [e for e in endpoints if e["node_id"] not in have]

    return Amend(fix)


# --- groups: routed to their coordinator ---------------------------------------------------


def _group_ids(api_key: int, version: int, req: Fields) -> list[str]:
    if (api_key == 9 and version >= 8) or api_key == 90:
        return [g["group_id"] for g in req["groups"]]
    if api_key == 15:
        return list(req["groups"])
    if api_key == 42:
        return list(req["groups_names"])
    if api_key in (69, 77):
        return list(req["group_ids"])
    return [req["group_id"]]


# group APIs whose request starts with the group id (OffsetFetch below v8 too): a request for
# a group this node coordinates goes on without being decoded here
_GROUP_FIRST = frozenset((8, 11, 12, 13, 14, 47, 68, 76, 91, 92))


def _first_string(frame: bytes | bytearray, pos: int, flexible: bool) -> str:
    """The string field at ``pos`` (compact in a flexible version)."""
    if flexible:
        n, pos = read_uvarint(frame, pos)
        n -= 1
    else:
        n = int.from_bytes(frame[pos : pos + 2], "big", signed=True)
        pos += 2
    if n < 0 or pos + n > len(frame):
        raise ValueError("no group id")
    return bytes(frame[pos : pos + n]).decode()


def _groups(conn: NodeConnection, spec: MessageSpec, req: Fields) -> bytes | None:
    api_key = spec.api_key
    groups = _group_ids(api_key, spec.version, req)
    nodes = conn.nodes
    if all(nodes.coordinator(0, g) == conn.node_id for g in groups):
        return None
    code = int(NOT_COORDINATOR)
    if api_key in (8, 28):  # the errors are the partitions'
        return spec.encode_response(
            {
                "topics": [
                    {
                        "name": t.get("name"),
                        "topic_id": t.get("topic_id"),
                        "partitions": [
                            {"partition_index": p["partition_index"], "error_code": code}
                            for p in t["partitions"]
                        ],
                    }
                    for t in req["topics"]
                ]
            }
        )
    if api_key == 9 and spec.version < 8:  # v0-v1 carry the error per partition only
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "committed_offset": -1, "error_code": code}
                    for p in t["partition_indexes"]
                ],
            }
            for t in req["topics"] or ()
        ]
        return spec.encode_response({"topics": topics, "error_code": code})
    if api_key in (9, 90):
        return spec.encode_response(
            {"groups": [{"group_id": g, "error_code": code, "topics": []} for g in groups]}
        )
    if api_key in (15, 69, 77):
        return spec.encode_response(
            {"groups": [{"group_id": g, "error_code": code, "members": []} for g in groups]}
        )
    if api_key == 42:
        return spec.encode_response(
            {"results": [{"group_id": g, "error_code": code} for g in groups]}
        )
    return spec.encode_error(code)


Check = Callable[[NodeConnection, MessageSpec, Fields], bytes | Amend | None]
# Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch, DescribeProducers
_CHECKS: dict[int, Check] = {key: _partitions for key in _LAYOUT}
# OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, DescribeGroups,
# TxnOffsetCommit, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat, ConsumerGroupDescribe,
# ShareGroupHeartbeat, ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets
_CHECKS.update(
    dict.fromkeys((8, 9, 11, 12, 13, 14, 15, 28, 42, 47, 68, 69, 76, 77, 90, 91, 92), _groups)
)
# ShareFetch, ShareAcknowledge: the member's session on this node, the partitions it leads
_CHECKS.update(dict.fromkeys((78, 79), share_check))
# parked until answered (a long-poll Fetch or ShareFetch, JoinGroup, SyncGroup): refused when
# leaderships move away from this node
_PARKS: dict[int, Check] = {1: _partitions, 11: _groups, 14: _groups, 78: share_parked}
