"""Kafka's ACL model and the decision it makes, pure (no I/O, no clock).

An `AclBinding` says: principal P from host H may (Allow) or may not (Deny) perform
operation O on resources of type T whose name equals (Literal) or starts with
(Prefixed) N. `"*"` as principal name (`User:*`), host or literal resource name
matches anything. `Authorizer.authorize` decides as Kafka's StandardAuthorizer does:

1. a super user (`super.users`) may do anything;
2. if no ACL at all matches the resource, the answer is `allow.everyone.if.no.acl.found`
   (false by default: deny);
3. any matching Deny of the operation (or of All) denies: deny wins;
4. any matching Allow of the operation, of All, or of an operation that implies it
   allows: Read, Write, Delete and Alter imply Describe; AlterConfigs implies
   DescribeConfigs;
5. otherwise deny.

Lookups are per request and per resource, so bindings are indexed by resource type
and literal name; prefixed bindings are scanned (there are few).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

from storage.files import validate_topic_name

if TYPE_CHECKING:
    from protocol import api_types as wire

WILDCARD = "*"
# The one cluster resource's name, as Kafka spells it.
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"
# A principal is `Type:name`; Kafka's only principal type in practice is User. The
# name is what a login or a certificate subject yields: never empty, no surrounding
# whitespace, no control characters (a binding with those would match nobody).
PRINCIPAL_RE = re.compile(r"User:(?![\s])[^\x00-\x1f\x7f]*(?<![\s])")


E = TypeVar("E", bound=StrEnum)


class ResourceType(StrEnum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


class PatternType(StrEnum):
    LITERAL = "Literal"
    PREFIXED = "Prefixed"


# A filter's pattern type only (Kafka's MATCH): every binding that applies to the name.
MATCH = "Match"


class Operation(StrEnum):
    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(StrEnum):
    ALLOW = "Allow"
    DENY = "Deny"


# Operation asked for -> the Allow operations that grant it (besides All), Kafka's rule.
_GRANTED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


def granted_by(operation: Operation) -> frozenset[Operation]:
    """Allow operations that grant `operation`: itself, All and Kafka's implications."""
    return _GRANTED_BY.get(operation, frozenset({operation})) | {Operation.ALL}


def check_host(host: str) -> str | None:
    """Why `host` can match no client, or None: a binding's host is `*` or one literal
    IP address in the form the broker sees client addresses in (no names, no ranges;
    Kafka's rule)."""
    if host == WILDCARD:
        return None
    try:
        canonical = str(ipaddress.ip_address(host))
    except ValueError:
        return f"host {host!r} must be '*' or one IP address (no host names or ranges)"
    if canonical != host:
        return f"host {host!r} must be written {canonical!r}, as client addresses are"
    return None


def parse_enum(kind: type[E], text: str) -> E:
    """Case-insensitive, as kafka-acls accepts (`read`, `READ`, `Read`)."""
    folded = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if member.value.lower() == folded:
            return member
    choices = ", ".join(m.value for m in kind)
    raise ValueError(f"unknown {kind.__name__} {text!r} (one of {choices})")


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL. Build from text with `AclBinding.parse(...)` to get validation."""

    principal: str
    host: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        if not PRINCIPAL_RE.fullmatch(self.principal) or self.principal == "User:":
            raise ValueError(
                f"principal {self.principal!r} must be User:<name> or User:* "
                "(no surrounding spaces or control characters)"
            )
        if not self.resource_name:
            raise ValueError("resource name must not be empty")
        host_problem = check_host(self.host)
        if host_problem:
            raise ValueError(host_problem)
        if self.resource_type is ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise ValueError(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise ValueError("a prefixed pattern cannot be '*' (use a literal '*')")
        if self.resource_type is ResourceType.TOPIC and self.resource_name != WILDCARD:
            problem = validate_topic_name(self.resource_name)
            prefixed = self.pattern_type is PatternType.PREFIXED
            if problem and not (prefixed and self.resource_name in (".", "..")):
                raise ValueError(f"{problem}: the binding could never match a topic")

    @classmethod
    def parse(
        cls,
        principal: str,
        host: str,
        resource_type: str,
        resource_name: str,
        pattern_type: str,
        operation: str,
        permission: str,
    ) -> AclBinding:
        return cls(
            principal,
            host,
            parse_enum(ResourceType, resource_type),
            resource_name,
            parse_enum(PatternType, pattern_type),
            parse_enum(Operation, operation),
            parse_enum(Permission, permission),
        )

    def to_json(self) -> wire.AclBinding:
        return {
            "principal": self.principal,
            "host": self.host,
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_json(cls, obj: wire.AclBinding) -> AclBinding:
        return cls.parse(
            obj["principal"],
            obj["host"],
            obj["resource_type"],
            obj["resource_name"],
            obj["pattern_type"],
            obj["operation"],
            obj["permission"],
        )

    def covers(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern matches the resource."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def __str__(self) -> str:
        return (
            f"{self.permission.value} {self.principal} from {self.host} "
            f"{self.operation.value} on {self.resource_type.value}:"
            f"{self.pattern_type.value}:{self.resource_name}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Selects bindings for `acls list/remove` (and Kafka's Describe/DeleteAcls): None = any."""

    principal: str | None = None
    host: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern_type: PatternType | None = None
    operation: Operation | None = None
    permission: Permission | None = None
    # MATCH: only bindings that apply to this resource name (literal, wildcard, prefix).
    applies_to: str | None = None

    def matches(self, binding: AclBinding) -> bool:
        if self.applies_to is not None and not binding.covers(
            binding.resource_type, self.applies_to
        ):
            return False
        return all(
            wanted is None or wanted == getattr(binding, name)
            for name, wanted in (
                ("principal", self.principal),
                ("host", self.host),
                ("resource_type", self.resource_type),
                ("resource_name", self.resource_name),
                ("pattern_type", self.pattern_type),
                ("operation", self.operation),
                ("permission", self.permission),
            )
        )


class Authorizer:
    """The decision over a fixed set of bindings (rebuild one to change them)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.bindings: tuple[AclBinding, ...] = tuple(sorted(set(bindings)))
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        for b in self.bindings:
            if b.pattern_type is PatternType.PREFIXED:
                self._prefixed.setdefault(b.resource_type, []).append(b)
            else:
                self._literal.setdefault((b.resource_type, b.resource_name), []).append(b)

    def matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose resource pattern matches the resource (any principal)."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [b for b in self._prefixed.get(resource_type, ()) if b.covers(resource_type, name)]
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether `principal` connecting from `host` may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        acls = self.matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [
            b for b in acls if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)
        ]
        if any(
            b.permission is Permission.DENY and b.operation in (operation, Operation.ALL)
            for b in mine
        ):
            return False
        granting = granted_by(operation)
        return any(b.permission is Permission.ALLOW and b.operation in granting for b in mine)
