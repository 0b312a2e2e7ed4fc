"""The ACL decision (broker/security/acl.py) against a small reference model, and Kafka's rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

OP = Operation
PRINCIPALS = ["User:alice", "User:bob"]
HOSTS = ["10.0.0.1", "10.0.0.2"]
NAMES = ["orders", "orders-eu", "ord", "billing", "b"]

# What each operation implies when allowed (Kafka's AclAuthorizer, stated forwards).
IMPLIES = {
    OP.READ: {OP.DESCRIBE},
    OP.WRITE: {OP.DESCRIBE},
    OP.DELETE: {OP.DESCRIBE},
    OP.ALTER: {OP.DESCRIBE},
    OP.ALTER_CONFIGS: {OP.DESCRIBE_CONFIGS},
}


def reference(bindings, super_users, allow_if_none, principal, host, op, rtype, name) -> bool:
    """The rules as Kafka's docs state them, by brute force over every binding."""
    if principal in super_users:
        return True

    def on_resource(b: AclBinding) -> bool:
        if b.resource_type != rtype:
            return False
        if b.pattern_type == PatternType.PREFIXED:
            return name[: len(b.resource_name)] == b.resource_name
        return b.resource_name == "*" or b.resource_name == name

    relevant = [b for b in bindings if on_resource(b)]
    if not relevant:
        return allow_if_none
    mine = [b for b in relevant if b.principal in (principal, "User:*") and b.host in (host, "*")]
    for b in mine:
        if b.permission == Permission.DENY and b.operation in (op, OP.ALL):
            return False
    return any(
        b.permission == Permission.ALLOW
        and (b.operation in (op, OP.ALL) or op in IMPLIES.get(b.operation, ()))
        for b in mine
    )


@st.composite
def bindings(draw) -> AclBinding:
    rtype = draw(st.sampled_from(list(ResourceType)))
    if rtype is ResourceType.CLUSTER:
        name, pattern = CLUSTER_NAME, PatternType.LITERAL
    else:
        pattern = draw(st.sampled_from(list(PatternType)))
        pool = NAMES if pattern is PatternType.PREFIXED else [*NAMES, "*"]
        name = draw(st.sampled_from(pool))
    return AclBinding(
        draw(st.sampled_from([*PRINCIPALS, "User:*"])),
        draw(st.sampled_from([*HOSTS, "*"])),
        rtype,
        name,
        pattern,
        draw(st.sampled_from(list(Operation))),
        draw(st.sampled_from(list(Permission))),
    )


@settings(max_examples=400)
@given(
    acls=st.lists(bindings(), max_size=8),
    super_users=st.sets(st.sampled_from(PRINCIPALS), max_size=1),
    allow_if_none=st.booleans(),
    principal=st.sampled_from(PRINCIPALS),
    host=st.sampled_from(HOSTS),
    op=st.sampled_from(list(Operation)),
    rtype=st.sampled_from(list(ResourceType)),
    name=st.sampled_from(NAMES),
)
def test_authorizer_agrees_with_the_reference_model(
    acls, super_users, allow_if_none, principal, host, op, rtype, name
) -> None:
    if rtype is ResourceType.CLUSTER:
        name = CLUSTER_NAME
    authorizer = Authorizer(acls, super_users=super_users, allow_if_no_acl=allow_if_none)
    expected = reference(acls, super_users, allow_if_none, principal, host, op, rtype, name)
    assert authorizer.authorize(principal, host, op, rtype, name) is expected


def acl(text: str) -> AclBinding:
    """'Allow User:alice * Read Topic Literal orders' -> a binding."""
    permission, principal, host, operation, rtype, pattern, name = text.split()
    return AclBinding.parse(principal, host, rtype, name, pattern, operation, permission)


def test_deny_by_default_once_an_authorizer_is_configured() -> None:
    authorizer = Authorizer([])
    assert not authorizer.authorize("User:alice", "h", OP.READ, ResourceType.TOPIC, "orders")
    lenient = Authorizer([], allow_if_no_acl=True)
    assert lenient.authorize("User:alice", "h", OP.READ, ResourceType.TOPIC, "orders")


def test_allow_if_no_acl_applies_only_to_resources_without_any_acl() -> None:
    authorizer = Authorizer(
        [acl("Allow User:bob * Read Topic Literal orders")], allow_if_no_acl=True
    )
    assert authorizer.authorize("User:alice", "h", OP.READ, ResourceType.TOPIC, "other")
    assert not authorizer.authorize("User:alice", "h", OP.READ, ResourceType.TOPIC, "orders")


def test_prefixed_acls_cover_names_with_that_prefix_only() -> None:
    authorizer = Authorizer([acl("Allow User:alice * Write Topic Prefixed orders-")])
    assert authorizer.authorize("User:alice", "h", OP.WRITE, ResourceType.TOPIC, "orders-eu")
    assert not authorizer.authorize("User:alice", "h", OP.WRITE, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize("User:alice", "h", OP.WRITE, ResourceType.GROUP, "orders-eu")


def test_deny_wins_over_allow_including_a_wildcard_deny() -> None:
    authorizer = Authorizer(
        [
            acl("Allow User:* * All Topic Literal *"),
            acl("Deny User:mallory * Read Topic Prefixed secret"),
            acl("Deny User:* 10.6.6.6 All Topic Literal *"),
        ]
    )
    can = authorizer.authorize
    assert can("User:alice", "10.0.0.1", OP.READ, ResourceType.TOPIC, "secret-plans")
    assert not can("User:mallory", "10.0.0.1", OP.READ, ResourceType.TOPIC, "secret-plans")
    assert can("User:mallory", "10.0.0.1", OP.WRITE, ResourceType.TOPIC, "secret-plans")
    assert not can("User:alice", "10.6.6.6", OP.DESCRIBE, ResourceType.TOPIC, "public")


def test_implied_operations() -> None:
    authorizer = Authorizer(
        [
            acl("Allow User:alice * Read Topic Literal t"),
            acl("Allow User:alice * AlterConfigs Topic Literal t"),
        ]
    )
    can = authorizer.authorize
    assert can("User:alice", "h", OP.DESCRIBE, ResourceType.TOPIC, "t")
    assert can("User:alice", "h", OP.DESCRIBE_CONFIGS, ResourceType.TOPIC, "t")
    assert not can("User:alice", "h", OP.WRITE, ResourceType.TOPIC, "t")
    # A Deny of Describe does not deny Read (Kafka: deny matches the operation or All).
    denied = Authorizer([*authorizer.bindings, acl("Deny User:alice * Describe Topic Literal t")])
    assert not denied.authorize("User:alice", "h", OP.DESCRIBE, ResourceType.TOPIC, "t")
    assert denied.authorize("User:alice", "h", OP.READ, ResourceType.TOPIC, "t")


def test_super_users_bypass_even_a_deny() -> None:
    authorizer = Authorizer(
        [acl("Deny User:* * All Cluster Literal kafka-cluster")], super_users={"User:admin"}
    )
    assert authorizer.authorize("User:admin", "h", OP.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    assert not authorizer.authorize("User:bob", "h", OP.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)


@pytest.mark.parametrize(
    "args",
    [
        ("alice", "*", "Topic", "t", "Literal", "Read", "Allow"),  # no User: prefix
        ("User:a", "*", "Cluster", "other", "Literal", "Alter", "Allow"),
        ("User:a", "*", "Topic", "*", "Prefixed", "Read", "Allow"),
        ("User:a", "*", "Topic", "t", "Literal", "Fly", "Allow"),
        ("User:a", "*", "Broker", "t", "Literal", "Read", "Allow"),
        ("User:a", "", "Topic", "t", "Literal", "Read", "Allow"),
    ],
)
def test_invalid_bindings_are_refused(args) -> None:
    with pytest.raises(ValueError):
        AclBinding.parse(*args)


def test_parse_is_case_insensitive_and_round_trips_json() -> None:
    binding = AclBinding.parse("User:a", "*", "topic", "t", "PREFIXED", "describe_configs", "deny")
    assert binding.operation is OP.DESCRIBE_CONFIGS and binding.permission is Permission.DENY
    assert AclBinding.from_json(binding.to_json()) == binding


def test_filter_matches_on_given_fields_only() -> None:
    a, b = acl("Allow User:a * Read Topic Literal t"), acl("Deny User:b * Read Topic Literal t")
    assert [x for x in (a, b) if AclFilter(permission=Permission.DENY).matches(x)] == [b]
    assert all(AclFilter().matches(x) for x in (a, b))
