"""Injected errors (the test controls' ``/api/test/errors``): the next requests of an API are
answered with a Kafka error, delayed, or their connection closed.

The connection's only part is one look-up before it dispatches a request: the broker's
``injected`` dict (API key -> ``ErrorInjector.intercept``) is empty unless a rule is pending,
so a broker with nothing injected pays one truthiness test per request. A filter on the client
id parses the request header; one on a group or a topic decodes the request, only then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from kgroupd.broker.handlers.registry import HOMES
from kgroupd.broker.net.connection import _Close
from kgroupd.protocol.api_names import API_NAMES
from kgroupd.protocol.errors import ErrorCode
from kgroupd.protocol.framing import encode_response, parse_request_header
from kgroupd.protocol.messages import MessageSpec

if TYPE_CHECKING:
    from kgroupd.broker.net.connection import KafkaConnection

__all__ = ["BadControl", "ErrorInjector", "ErrorRule", "error_body"]

log = structlog.get_logger("kgroupd.test_controls")
_BY_NAME = {name.lower(): key for key, name in API_NAMES.items()}
_FIELDS = {"api", "error", "count", "client_id", "group_id", "topic", "delay_ms", "disconnect"}
MAX_DELAY_MS = 300_000
Intercept = Callable[["KafkaConnection", bytes, MessageSpec, int], Any]


class BadControl(ValueError):
    """A control request that cannot be carried out: answered 400 with this reason."""


@dataclasses.dataclass
class ErrorRule:
    id: int
    api_key: int
    error: ErrorCode | None  # None: only a delay and/or a disconnect
    count: int  # requests still to meet this rule
    client_id: str | None = None
    group_id: str | None = None
    topic: str | None = None
    delay_ms: int = 0
    disconnect: bool = False

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "api": API_NAMES.get(self.api_key, str(self.api_key)),
            "api_key": self.api_key,
            "error": self.error.name if self.error is not None else None,
            "error_code": int(self.error) if self.error is not None else None,
            "count": self.count,
            "client_id": self.client_id,
            "group_id": self.group_id,
            "topic": self.topic,
            "delay_ms": self.delay_ms,
            "disconnect": self.disconnect,
        }


def parse_rule(body: Any, rule_id: int) -> ErrorRule:
    """An ``ErrorRule`` from the JSON of ``POST /api/test/errors``; ``BadControl`` says why not."""
    if not isinstance(body, dict):
        raise BadControl("the body must be a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise BadControl(
            f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}"
        )
    api_key = _api_key(body.get("api"))
    error = _error(body.get("error"))
    count = _int(body, "count", 1, 1, 1_000_000)
    delay_ms = _int(body, "delay_ms", 0, 0, MAX_DELAY_MS)
    disconnect = body.get("disconnect", False)
    if not isinstance(disconnect, bool):
        raise BadControl("disconnect must be true or false")
    if error is not None and disconnect:
        raise BadControl(
            "error and disconnect exclude each other: a closed connection answers nothing"
        )
    if error is None and not disconnect and delay_ms == 0:
        raise BadControl("give an error, a delay_ms or disconnect: true")
    filters = {}
    for name in ("client_id", "group_id", "topic"):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise BadControl(f"{name} must be a string")
        filters[name] = value
    return ErrorRule(
        rule_id, api_key, error, count, delay_ms=delay_ms, disconnect=disconnect, **filters
    )


def _api_key(api: Any) -> int:
    if api is None:
        raise BadControl("api is required: an API's name (Produce) or key (0)")
    if isinstance(api, bool):
        raise BadControl(f"api must be an API's name or key, not {api!r}")
    key = api if isinstance(api, int) else _BY_NAME.get(str(api).lower())
    if key is None and isinstance(api, str) and api.isdigit():
        key = int(api)
    if key is None or key not in HOMES:
        raise BadControl(f"api {api!r} is not an API this broker serves")
    return key


def _error(error: Any) -> ErrorCode | None:
    if error is None:
        return None
    try:
        if isinstance(error, bool):
            raise ValueError
        if isinstance(error, int) or (isinstance(error, str) and error.lstrip("-").isdigit()):
            code = ErrorCode(int(error))
        else:
            code = ErrorCode[str(error).upper()]
    except (KeyError, ValueError):
        raise BadControl(f"error {error!r} is not a Kafka error name or code") from None
    if code is ErrorCode.NONE:
        raise BadControl("error NONE is no error: give delay_ms alone to delay answers")
    return code


def _int(body: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadControl(f"{name} must be an integer from {lo} to {hi}, not {value!r}")
    return value


def error_body(spec: MessageSpec, code: ErrorCode, request: dict[str, Any] | None) -> bytes:
    """The answer carrying ``code``: the one error reply of the API and version
    (``encode_error``), except that a Produce answers per partition (where its errors live
    and clients look for them)."""
    if spec.api_key == 0 and request is not None:
        responses = [
            {
                "name": t.get("name"),
                "topic_id": t.get("topic_id"),
                "partition_responses": [
                    {
                        "index": p["index"],
                        "error_code": int(code),
                        "base_offset": -1,
                        "log_append_time_ms": -1,
                        "log_start_offset": -1,
                        "record_errors": [],
                    }
                    for p in t["partition_data"]
                ],
            }
            for t in request["topic_data"]
        ]
        return spec.encode_response({"responses": responses})
    return spec.encode_error(int(code))


class ErrorInjector:
    """The pending rules, and the hook the connection calls for an API that has any."""

    def __init__(self, injected: dict[int, Intercept]) -> None:
        self._hooks = injected  # the broker's: the connection looks API keys up in it
        self._rules: list[ErrorRule] = []
        self._ids = itertools.count(1)
        self._through: set[int] = set()  # frames delayed once, now let through

    def add(self, body: Any) -> ErrorRule:
        rule = parse_rule(body, next(self._ids))
        self._rules.append(rule)
        self._hooks[rule.api_key] = self.intercept
        log.info("test_error_injected", **rule.view())
        return rule

    def pending(self) -> list[dict[str, Any]]:
        return [rule.view() for rule in self._rules]

    def clear(self) -> int:
        cleared = len(self._rules)
        self._rules.clear()
        self._hooks.clear()
        return cleared

    def intercept(
        self, conn: KafkaConnection, frame: bytes, spec: MessageSpec, corr: int
    ) -> bytes | tuple[Awaitable[Any], MessageSpec, int] | None:
        """None: handle the request as usual. Else what the connection does instead: framed
        answer bytes, or an awaitable answer (a delay); ``_Close`` closes the connection."""
        if self._through and id(frame) in self._through:
            self._through.discard(id(frame))
            return None
        rule, request = self._match(frame, spec)
        if rule is None:
            return None
        rule.count -= 1
        if rule.count <= 0:
            self._rules.remove(rule)
            if not any(r.api_key == rule.api_key for r in self._rules):
                self._hooks.pop(rule.api_key, None)
        conn.log.info(
            "test_error_answered",
            rule=rule.id,
            api_key=spec.api_key,
            error=rule.error.name if rule.error is not None else None,
            delay_ms=rule.delay_ms,
            disconnect=rule.disconnect,
        )
        if rule.disconnect:
            if rule.delay_ms:
                return self._later(conn, rule, frame, request, spec), spec, corr
            # the connection answers what came before, then closes
            raise _Close("disconnected by the test controls")
        if rule.delay_ms:
            return self._later(conn, rule, frame, request, spec), spec, corr
        assert rule.error is not None
        if _unanswered(spec, request, frame):
            return None  # acks=0: the client expects no answer; the request is dropped
        body = error_body(spec, rule.error, request)
        return encode_response(corr, body, spec.response_header_v1)

    def _match(
        self, frame: bytes, spec: MessageSpec
    ) -> tuple[ErrorRule | None, dict[str, Any] | None]:
        client_id: str | None = None
        request: dict[str, Any] | None = None
        header_read = decoded = False
        for rule in self._rules:
            if rule.api_key != spec.api_key:
                continue
            if rule.client_id is not None:
                if not header_read:
                    header_read = True
                    try:
                        client_id = parse_request_header(frame, spec.flexible).client_id
                    except Exception:
                        return None, None  # the handler's decode closes the connection
                if client_id != rule.client_id:
                    continue
            if rule.group_id is not None or rule.topic is not None or spec.api_key == 0:
                if not decoded:
                    decoded = True
                    request = _decode(frame, spec)
                    if request is None:
                        return None, None
                assert request is not None
                if rule.group_id is not None and rule.group_id not in _groups(request):
                    continue
                if rule.topic is not None and rule.topic not in _topics(request):
                    continue
            return rule, request
        return None, request

    async def _later(
        self,
        conn: KafkaConnection,
        rule: ErrorRule,
        frame: bytes,
        request: dict[str, Any] | None,
        spec: MessageSpec,
    ) -> bytes | None:
        await asyncio.sleep(rule.delay_ms / 1000)
        if conn.closing:
            return None
        if rule.disconnect:
            conn._close("disconnected by the test controls", error=False)
            return None
        if rule.error is not None:
            if _unanswered(spec, request, frame):
                return None
            return error_body(spec, rule.error, request)
        # only a delay: the request goes back to the head of the queue and is handled as usual
        self._through.add(id(frame))
        conn.queue.appendleft(frame)
        conn.reader.queued += len(frame)
        return None


def _decode(frame: bytes, spec: MessageSpec) -> dict[str, Any] | None:
    try:
        header = parse_request_header(frame, spec.flexible)
        return spec.decode_request(frame, header.body_offset)
    except Exception:
        return None  # malformed: the handler's own decode closes the connection


def _unanswered(spec: MessageSpec, request: dict[str, Any] | None, frame: bytes) -> bool:
    return spec.api_key == 0 and request is not None and request.get("acks") == 0


def _groups(request: dict[str, Any]) -> set[str]:
    found = set()
    for field in ("group_id", "key"):
        value = request.get(field)
        if isinstance(value, str):
            found.add(value)
    for field in ("groups", "group_ids", "coordinator_keys"):
        for value in request.get(field) or ():
            if isinstance(value, str):
                found.add(value)
            elif isinstance(value, dict) and isinstance(value.get("group_id"), str):
                found.add(value["group_id"])
    return found


def _topics(request: dict[str, Any]) -> set[str]:
    found = set()
    for field in ("topics", "topic_data", "creations", "deletions"):
        for value in request.get(field) or ():
            if isinstance(value, str):
                found.add(value)
            elif isinstance(value, dict):
                for name in ("name", "topic"):
                    if isinstance(value.get(name), str):
                        found.add(value[name])
    for name in request.get("topic_names") or ():
        if isinstance(name, str):
            found.add(name)
    return found
