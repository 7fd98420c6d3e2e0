"""Client quota configs (KIP-546): what DescribeClientQuotas lists and AlterClientQuotas
changes, checked as Kafka 4.3's controller checks them (ClientQuotaControlManager) and kept
in ``quotas.json`` under ``--data-dir`` (written atomically on every change).

An entity is a user, a client id, both, or an IP address; a null name is the default entity
of its type (``<default>``). Users and client ids take ``producer_byte_rate``,
``consumer_byte_rate`` (whole numbers), ``request_percentage`` and ``controller_mutation_rate``;
IPs ``connection_creation_rate`` (a whole number). ``kgroupd.broker.throttle`` enforces them.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kgroupd.broker.security.credentials import SecuritySetupError
from kgroupd.protocol.errors import ErrorCode

FILE_NAME = "quotas.json"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
PRODUCE, FETCH, REQUEST, MUTATION = (
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
)
CONNECTION_RATE = "connection_creation_rate"
_INT_MAX, _LONG_MAX = 2**31 - 1, 2**63 - 1
# key -> the largest whole value it takes (None: a double)
CLIENT_KEYS: dict[str, int | None] = {PRODUCE: _LONG_MAX, FETCH: _LONG_MAX, REQUEST: None}
CLIENT_KEYS[MUTATION] = None
IP_KEYS: dict[str, int | None] = {CONNECTION_RATE: _INT_MAX}
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity: its (type, name) pairs sorted by type; a None name is the type's default.
Entity = tuple[tuple[str, str | None], ...]


class QuotaError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> QuotaError:
    return QuotaError(ErrorCode.INVALID_REQUEST, message)


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(dict(pairs).items()))


def describe_entity(entity: Entity) -> str:
    """As Kafka's ClientQuotaEntity prints itself."""
    inner = ", ".join(f"{t}={n}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


@dataclass(frozen=True)
class Alteration:
    entity: Entity
    ops: list[tuple[str, float, bool]]  # (key, value, remove)


class QuotaStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path  # None: in memory only
        self.quotas: dict[Entity, dict[str, float]] = {}
        self.version = 0  # bumped on every change (kgroupd.broker.throttle re-reads)
        # the keys set for some entity, kept on every change (a quota of a kind is enforced
        # only once one is set: Throttle.enabled, and the hot requests' lane read it)
        self.keys: frozenset[str] = frozenset()

    # --- DescribeClientQuotas ---------------------------------------------------------------
    def describe(
        self, components: list[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities matching the filter, Kafka's ClientQuotasImage.describe."""
        exact: dict[str, str | None] = {}
        typed: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise _invalid("Invalid empty entity type.")
            if kind in exact or kind in typed:
                raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in ENTITY_TYPES:
                raise QuotaError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise _invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null."
                    )
                exact[kind] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise _invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                    )
                exact[kind] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise _invalid(
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                    )
                typed.add(kind)
            else:
                raise _invalid(f"Unknown match type {match_type}")
        named = set(exact) | typed
        if IP in named and named & {USER, CLIENT_ID}:
            raise _invalid(
                "Invalid entity filter component combination. IP filter component should not "
                "be used with user or clientId filter component."
            )
        out = []
        for entity, values in self.quotas.items():
            names = dict(entity)
            if strict and len(names) != len(named):
                continue
            if all(k in names and names[k] == v for k, v in exact.items()) and typed <= set(names):
                out.append((entity, dict(values)))
        return out

    # --- AlterClientQuotas ------------------------------------------------------------------
    def alter(
        self, alterations: list[Alteration], validate_only: bool
    ) -> dict[Entity, QuotaError | None]:
        """Each entity's outcome (None: done), as Kafka's controller gives it; nothing is
        applied under ``validate_only``."""
        results: dict[Entity, QuotaError | None] = {}
        changes: list[tuple[Entity, dict[str, float | None]]] = []
        for alteration in alterations:
            entity = alteration.entity
            wanted: dict[str, float | None] = {}
            for key, value, remove in alteration.ops:
                if key in wanted:
                    results[entity] = _invalid(
                        f"Duplicate quota key {key} not updating quota for this entity "
                        f"{describe_entity(entity)}"
                    )
                wanted[key] = None if remove else value
            if entity in results:
                results[entity] = _invalid(f"Ignoring duplicate entity {describe_entity(entity)}")
                continue
            try:
                self._check(entity, wanted)
            except QuotaError as exc:
                results[entity] = exc
                continue
            results[entity] = None
            changes.append((entity, wanted))
        if not validate_only and changes:
            for entity, wanted in changes:
                current = self.quotas.setdefault(entity, {})
                for key, new in wanted.items():
                    if new is None:
                        current.pop(key, None)
                    else:
                        current[key] = new
                if not current:
                    del self.quotas[entity]
            self._changed()
            self.save()
        return results

    @staticmethod
    def _check(entity: Entity, wanted: dict[str, float | None]) -> None:
        if not entity:
            raise _invalid("Invalid empty client quota entity")
        for kind, name in entity:
            if kind not in ENTITY_TYPES:
                raise _invalid(f"Unhandled client quota entity type: {kind}")
            if name is not None and not name:
                raise _invalid(f"Empty {kind} not supported")
        names = dict(entity)
        if IP in names:
            if len(names) > 1:
                raise _invalid(
                    "Invalid quota entity combination, IP entity shouldnot be combined with "
                    "User or ClientId"
                )
            ip = names[IP]
            if ip is not None and not _resolvable(ip):
                raise _invalid(f"{ip} is not a valid IP or resolvable host.")
            keys = IP_KEYS
        else:
            keys = CLIENT_KEYS
        for key, value in wanted.items():
            if value is None:
                continue
            if key not in keys:
                raise _invalid(f"Invalid configuration key {key}")
            if not value > 0.0:
                raise _invalid(f"Quota {key} must be greater than 0")
            largest = keys[key]
            if largest is not None:
                if value > largest:
                    kind = "an INT" if largest == _INT_MAX else "a LONG"
                    raise _invalid(f"Proposed value for {key} is too large for {kind}.")
                if abs(value % 1.0) > 1e-6:
                    raise _invalid(f"{key} cannot be a fractional value.")

    # --- persistence ------------------------------------------------------------------------
    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        raw = json.loads(self.path.read_text())
        for item in raw["entities"]:
            entity = entity_of(item["entity"].items())
            self.quotas[entity] = {k: float(v) for k, v in item["quotas"].items()}
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self.keys = frozenset(k for values in self.quotas.values() for k in values)

    def save(self) -> None:
        """Write every quota atomically (temp file, fsync, rename)."""
        if self.path is None:
            return
        table = [
            {"entity": dict(entity), "quotas": values}
            for entity, values in sorted(self.quotas.items(), key=lambda kv: repr(kv[0]))
        ]
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, json.dumps({"version": 1, "entities": table}, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


def _resolvable(host: str) -> bool:
    """Kafka's InetAddress.getByName, without asking a resolver: an IP literal, or a name
    that could be one (kgroupd does not look names up at request time)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return all(part and part.replace("-", "").isalnum() for part in host.split("."))


def open_quotas(data_dir: str | None) -> QuotaStore:
    store = QuotaStore(Path(data_dir) / FILE_NAME if data_dir else None)
    try:
        store.load()
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecuritySetupError(f"{store.path}: unreadable client quotas: {exc!r}") from None
    return store
