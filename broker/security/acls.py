"""ACLs as Kafka's StandardAuthorizer applies them (``--authorizer acl``).

An ACL allows or denies one operation (or ALL) on resources of one type named literally,
by prefix, or by the wildcard ``*``, to one principal (or ``User:*``) from one host (or ``*``).
A request is denied when a matching DENY exists, allowed when a matching ALLOW exists, and
otherwise allowed only with ``--allow-everyone-if-no-acl-found`` and no ACL at all on the
resource. Super users (``--super-users``) pass every check. ALLOW of READ, WRITE, DELETE or
ALTER implies DESCRIBE, and ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS, as in Kafka.

ACLs are kept in ``acls.json`` under ``--data-dir`` (written atomically on every change).
Decisions are cached per connection (``Access``) until the ACLs change.
"""

from __future__ import annotations

import json
import os
import weakref
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path

FILE_NAME = "acls.json"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"
ANONYMOUS = "User:ANONYMOUS"  # the principal of a client that did not authenticate
KEPT = 10_000  # decisions an Access keeps at most


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


GROUP_READ_KEY = ResourceType.GROUP << 8 | Operation.READ  # Access.granted's key of GROUP READ
_OPERATIONS = {int(o) for o in Operation}
# ALLOW of any of these implies ALLOW of the key (Kafka's AclEntry implied operations)
_IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}
# Operations an ACL may name per resource type (Kafka's AclEntry.supportedOperations)
SUPPORTED = {
    ResourceType.TOPIC: {
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    },
    ResourceType.GROUP: {Operation.READ, Operation.DESCRIBE, Operation.DELETE},
    ResourceType.CLUSTER: {
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    },
    ResourceType.TRANSACTIONAL_ID: {
        Operation.DESCRIBE,
        Operation.WRITE,
        Operation.TWO_PHASE_COMMIT,
    },
    ResourceType.DELEGATION_TOKEN: {Operation.DESCRIBE},
    ResourceType.USER: {Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS},
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def invalid(self) -> str | None:
        """Why Kafka would refuse to create this ACL (INVALID_REQUEST), or None."""
        if self.resource_type not in SUPPORTED:
            return f"Invalid resource type {self.resource_type}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "Invalid pattern type: only LITERAL and PREFIXED ACLs can be created"
        if not self.resource_name:
            return "Resource name should not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return "The only valid name for the CLUSTER resource is kafka-cluster"
        if ":" not in self.principal or self.principal.startswith(":"):
            return f"Could not parse principal from `{self.principal}` (no colon is found)."
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "Invalid permission type"
        supported = SUPPORTED[ResourceType(self.resource_type)]
        if self.operation != Operation.ALL and self.operation not in supported:
            name = Operation(self.operation).name if self.operation in _OPERATIONS else "UNKNOWN"
            kind = ResourceType(self.resource_type).name
            return f"ACL operation {name} is not supported on {kind}"
        if not self.host:
            return "Host should not be empty"
        return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filters: None or ANY matches everything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not _pattern_matches(acl, self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != Operation.ANY and acl.operation != self.operation:
            return False
        return self.permission == Permission.ANY or acl.permission == self.permission

    def invalid(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN or self.resource_type not in set(
            ResourceType
        ):
            return "Invalid resource type filter"
        if self.pattern_type == PatternType.UNKNOWN or self.pattern_type not in set(PatternType):
            return "Invalid pattern type filter"
        if self.operation == Operation.UNKNOWN or self.operation not in set(Operation):
            return "Invalid operation filter"
        if self.permission == Permission.UNKNOWN or self.permission not in set(Permission):
            return "Invalid permission type filter"
        return None


def _pattern_matches(acl: AclBinding, name: str) -> bool:
    """Does this ACL's resource pattern cover the resource ``name``?"""
    if acl.pattern_type == PatternType.PREFIXED:
        return name.startswith(acl.resource_name)
    return acl.resource_name in (name, WILDCARD)


class Authorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        path: Path | None = None,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone = allow_everyone_if_no_acl_found
        self.path = path
        self.acls: set[AclBinding] = set()
        self.version = 0  # bumped on every change
        self._by_type: dict[int, list[AclBinding]] = {}
        self.views: weakref.WeakSet[Access] = weakref.WeakSet()  # emptied on every change

    # --- decisions -----------------------------------------------------------------------
    def authorize(
        self, principal: str, host: str, resource_type: int, name: str, operation: int
    ) -> bool:
        if principal in self.super_users:
            return True
        found_any = False
        allowed = False
        implied = _IMPLIED_BY.get(Operation(operation), ())
        for acl in self._by_type.get(resource_type, ()):
            if not _pattern_matches(acl, name):
                continue
            found_any = True
            if acl.principal != principal and acl.principal != "User:*":
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.permission == Permission.DENY:
                if acl.operation in (operation, Operation.ALL):
                    return False
            elif acl.operation in (operation, Operation.ALL) or acl.operation in implied:
                allowed = True
        if allowed:
            return True
        return self.allow_everyone and not found_any

    def any_allowed(self, principal: str, host: str, resource_type: int, operation: int) -> bool:
        """Kafka's authorizeByResourceType, simplified: some ALLOW ACL of the type grants the
        operation to the principal and no wildcard DENY takes it back (or no ACL of the type
        exists and everyone is allowed)."""
        if principal in self.super_users:
            return True
        acls = [
            a
            for a in self._by_type.get(resource_type, ())
            if a.principal in (principal, "User:*")
            and a.host in (host, WILDCARD)
            and a.operation in (operation, Operation.ALL)
        ]
        if any(
            a.permission == Permission.DENY
            and a.pattern_type == PatternType.LITERAL
            and a.resource_name == WILDCARD
            for a in acls
        ):
            return False
        if any(a.permission == Permission.ALLOW for a in acls):
            return True
        return self.allow_everyone and not self._by_type.get(resource_type)

    # --- changes -------------------------------------------------------------------------
    def add(self, acls: Iterable[AclBinding]) -> None:
        self.acls.update(acls)
        self._changed()

    def remove(self, acls: Iterable[AclBinding]) -> None:
        self.acls.difference_update(acls)
        self._changed()

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        return sorted(
            (a for a in self.acls if acl_filter.matches(a)),
            key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal),
        )

    def _changed(self) -> None:
        self._index()
        self.save()

    def _index(self) -> None:
        self.version += 1
        by_type: dict[int, list[AclBinding]] = {}
        for acl in self.acls:
            by_type.setdefault(acl.resource_type, []).append(acl)
        self._by_type = by_type
        for view in list(self.views):
            view.forget()

    # --- persistence ---------------------------------------------------------------------
    def load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        raw = json.loads(self.path.read_text())
        self.acls = {AclBinding(**item) for item in raw}
        self._index()

    def save(self) -> None:
        if self.path is None:
            return
        table = [asdict(a) for a in sorted(self.acls, key=lambda a: tuple(asdict(a).values()))]
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(table, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)


class Access:
    """One connection's view: its principal and host, decisions cached until ACLs change.

    ``granted`` holds the names allowed so far per ``resource_type << 8 | operation`` (a
    set; a missing key reads as an empty set): the hot requests ask ``name in
    access.group_reads`` and ``Rule.denies`` its rule's set before calling ``allowed``.
    Refusals are kept apart. The authorizer empties both when its ACLs change."""

    __slots__ = (
        "__weakref__",
        "_kept",
        "_refused",
        "authorizer",
        "granted",
        "group_reads",
        "host",
        "principal",
    )

    def __init__(self, authorizer: Authorizer, principal: str, host: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.group_reads: set[str] = set()  # the groups it may READ (GROUP_READ_KEY's set)
        self.granted: defaultdict[int, set[str]] = defaultdict(set)
        self.granted[GROUP_READ_KEY] = self.group_reads
        self._refused: set[tuple[int, str, int]] = set()
        self._kept = 0  # decisions kept, at most KEPT
        authorizer.views.add(self)

    def allowed(self, resource_type: int, name: str, operation: int) -> bool:
        # (.get: a set is made for a key only once a decision under it is kept)
        granted = self.granted.get(resource_type << 8 | operation)
        if granted is not None and name in granted:
            return True
        key = (resource_type, name, operation)
        if key in self._refused:
            return False
        decision = self.authorizer.authorize(
            self.principal, self.host, resource_type, name, operation
        )
        if self._kept < KEPT:
            self._kept += 1
            if not decision:
                self._refused.add(key)
            elif granted is None:
                self.granted[resource_type << 8 | operation] = {name}
            else:
                granted.add(name)
        return decision

    def forget(self) -> None:
        """The ACLs changed: decide everything again."""
        for names in self.granted.values():
            names.clear()
        self._refused.clear()
        self._kept = 0

    def any_allowed(self, resource_type: int, operation: int) -> bool:
        return self.authorizer.any_allowed(self.principal, self.host, resource_type, operation)

    def cluster(self, operation: int) -> bool:
        return self.allowed(ResourceType.CLUSTER, CLUSTER_NAME, operation)


def open_authorizer(
    mode: str | None, super_users: str | None, allow_everyone: bool, data_dir: str | None
) -> Authorizer | None:
    """The authorizer ``--authorizer acl`` asks for (None without it)."""
    if mode != "acl":
        return None
    users = [u.strip() for u in (super_users or "").split(";") if u.strip()]
    authorizer = Authorizer(users, allow_everyone, Path(data_dir) / FILE_NAME if data_dir else None)
    authorizer.load()
    return authorizer
