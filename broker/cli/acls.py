"""`tidelog acls add|list|remove --data-dir DIR`: the ACLs of a broker's data directory.

Flags follow `kafka-acls`: `--allow-principal`/`--deny-principal` (repeatable),
`--allow-host`/`--deny-host`, `--operation` (repeatable), one of `--topic`,
`--group` or `--cluster`, and `--resource-pattern-type literal|prefixed`. The file
is `acls.json` (broker/security/acl_store.py); a running broker applies a change
within a second, and it survives restarts.
"""

from __future__ import annotations

import argparse
import json

from broker.cli.common import EXIT_OK, CliError, Subcommands, format_parent, print_out
from broker.cli.users import data_dir_parent
from broker.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from broker.security.acl_store import AclStore


def _resource_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    which = parent.add_mutually_exclusive_group()
    which.add_argument("--topic", metavar="NAME", help="a topic name (or '*', or a prefix)")
    which.add_argument("--group", metavar="NAME", help="a consumer group id (or '*', a prefix)")
    which.add_argument("--cluster", action="store_true", help="the cluster resource")
    which.add_argument(
        "--transactional-id", metavar="ID", help="a producer's transactional id (or '*', a prefix)"
    )
    parent.add_argument(
        "--resource-pattern-type",
        choices=("literal", "prefixed"),
        help="how NAME matches (add: default literal; list/remove: any)",
    )
    parent.add_argument(
        "--operation",
        action="append",
        metavar="OP",
        help="Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs, "
        "ClusterAction, IdempotentWrite or All (repeatable)",
    )
    return parent


def register(subparsers: Subcommands) -> None:
    """Add the `acls` command group."""
    acls = subparsers.add_parser(
        "acls",
        help="manage ACLs (authorizer=on)",
        description="Manage the ACLs the broker's authorizer applies (Kafka's model).",
    )
    sub = acls.add_subparsers(dest="acls_command", metavar="COMMAND", required=True)
    add = sub.add_parser(
        "add",
        parents=[data_dir_parent(), _resource_parent()],
        help="add ACLs",
        epilog=(
            "example: tidelog acls add --data-dir ./data --allow-principal User:alice "
            "--operation Read --topic orders- --resource-pattern-type prefixed"
        ),
    )
    add.add_argument("--allow-principal", action="append", default=[], metavar="P")
    add.add_argument("--deny-principal", action="append", default=[], metavar="P")
    add.add_argument("--allow-host", action="append", default=[], metavar="IP")
    add.add_argument("--deny-host", action="append", default=[], metavar="IP")
    add.set_defaults(func=run_add)
    for name, func, doc in (("list", run_list, "list ACLs"), ("remove", run_remove, "remove")):
        cmd = sub.add_parser(
            name,
            parents=[data_dir_parent(), _resource_parent(), format_parent()],
            help=f"{doc} (the filters given must all match)",
        )
        cmd.add_argument("--principal", metavar="P", help="only this principal")
        cmd.set_defaults(func=func)


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str] | None:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    return None


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    resource = _resource(args)
    if resource is None:
        raise CliError(
            "BAD_INPUT", "name a resource: --topic, --group, --cluster or --transactional-id"
        )
    if not args.operation:
        raise CliError("BAD_INPUT", "name at least one --operation")
    if not (args.allow_principal or args.deny_principal):
        raise CliError("BAD_INPUT", "name at least one --allow-principal or --deny-principal")
    pattern = args.resource_pattern_type or "literal"
    grants = [(Permission.ALLOW, p, args.allow_host or [WILDCARD]) for p in args.allow_principal]
    grants += [(Permission.DENY, p, args.deny_host or [WILDCARD]) for p in args.deny_principal]
    try:
        return [
            AclBinding.parse(principal, host, resource[0], resource[1], pattern, op, permission)
            for permission, principal, hosts in grants
            for host in hosts
            for op in args.operation
        ]
    except ValueError as exc:
        raise CliError("BAD_INPUT", str(exc)) from exc


def _filter(args: argparse.Namespace) -> AclFilter:
    resource = _resource(args)
    operations = args.operation or []
    if len(operations) > 1:
        raise CliError("BAD_INPUT", "list and remove take at most one --operation")
    try:
        pattern = args.resource_pattern_type
        pattern_type = parse_enum(PatternType, pattern) if pattern else None
        operation = parse_enum(Operation, operations[0]) if operations else None
    except ValueError as exc:
        raise CliError("BAD_INPUT", str(exc)) from exc
    return AclFilter(
        principal=args.principal,
        resource_type=resource[0] if resource else None,
        resource_name=resource[1] if resource else None,
        pattern_type=pattern_type,
        operation=operation,
    )


def _print(bindings: list[AclBinding], fmt: str) -> None:
    if fmt == "json":
        print_out(json.dumps([b.to_json() for b in bindings], indent=2))
    else:
        for binding in bindings:
            print_out(str(binding))


def run_add(args: argparse.Namespace) -> int:
    bindings = _bindings(args)
    added = AclStore(args.data_dir).add(bindings)
    print_out(f"added {added} ACL(s) ({len(bindings) - added} already present)")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    _print(AclStore(args.data_dir).bindings(_filter(args)), args.format)
    return EXIT_OK


def run_remove(args: argparse.Namespace) -> int:
    removed = AclStore(args.data_dir).remove(_filter(args))
    _print(removed, args.format)
    print_out(f"removed {len(removed)} ACL(s)")
    return EXIT_OK
