"""Security: users (names and mechanisms only) and ACLs; managed where the viewer may.

ACLs are read and changed with `describe_acls`, `create_acls` and `delete_acls`
(Describe / Alter on the cluster, as for `tidelog acls`). Users are in the data
directory's credential file, which no API serves: the console checks the same
cluster rights itself (audited as the gate audits), and writes through the same
`CredentialStore` that `tidelog users` uses. No stored salt, key or password is shown.
"""

from __future__ import annotations

from broker import offload
from broker.authz.access import permits
from broker.console.base import Call, back
from broker.console.http import Response
from broker.console.render import View, esc, field, form, page, select, table, url
from broker.security.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from broker.security.requires import Right
from protocol.errors import ClusterAuthorizationFailed, InvalidRequest

ACL_FIELDS = (
    "principal",
    "host",
    "resource_type",
    "resource_name",
    "pattern_type",
    "operation",
    "permission",
)
_ANY = {key: None for key in ACL_FIELDS}
_NEW_PASSWORD = " required autocomplete=new-password"


def _choices(
    enum: type[ResourceType] | type[PatternType] | type[Operation] | type[Permission],
) -> list[tuple[str, str]]:
    return [(m.value, m.value) for m in enum]


def _require(call: Call, op: Operation, what: str) -> None:
    if not permits(call.ctx, f"console_{what}", Right(op, ResourceType.CLUSTER), CLUSTER_NAME):
        raise ClusterAuthorizationFailed(f"not authorized to {op.value} cluster (users)")


def _acl_form(view: View) -> str:
    inner = (
        f"{field('Principal', 'principal', 'User:', extra=' required')}"
        f"{field('Host', 'host', '*')}"
        f"{select('Resource type', 'resource_type', _choices(ResourceType), 'Topic')}"
        f"{field('Resource name', 'resource_name', extra=' required')}"
        f"{select('Pattern', 'pattern_type', _choices(PatternType), 'Literal')}"
        f"{select('Operation', 'operation', _choices(Operation), 'Read')}"
        f"{select('Permission', 'permission', _choices(Permission), 'Allow')}"
    )
    return "<h3>Add an ACL</h3>" + form(view, url("security", "acls", "add"), inner, "Add ACL")


def _acl_rows(view: View, acls: list[dict[str, str]]) -> list[list[str]]:
    rows = []
    for acl in acls:
        hidden = "".join(
            f'<input type="hidden" name="{k}" value="{esc(acl[k])}">' for k in ACL_FIELDS
        )
        remove = form(view, url("security", "acls", "delete"), hidden, "Remove", danger=True)
        rows.append([esc(acl[k]) for k in ACL_FIELDS] + [remove])
    return rows


def _user_forms(view: View) -> str:
    add = field("User name", "username", extra=" required autocomplete=off", form="u") + field(
        "Password", "password", kind="password", extra=_NEW_PASSWORD, form="u"
    )
    remove = field("User name", "username", extra=" required autocomplete=off", form="r")
    return (
        "<h3>Add or replace a user</h3>"
        + form(view, url("security", "users", "add"), add, "Save user")
        + "<h3>Remove a user</h3>"
        + form(view, url("security", "users", "delete"), remove, "Remove user", danger=True)
    )


async def security(call: Call) -> Response:
    security_ = call.ctx.security
    if security_ is None:
        return page(call.view, "security", "Security", "<p>This broker runs without security.</p>")
    _require(call, Operation.DESCRIBE, "users")
    users = await offload.to_worker(security_.credentials.users)
    user_rows = [[esc(name), esc(", ".join(mechs))] for name, mechs in users.items()]
    if security_.authorizer_enabled:
        acls = (await call.actor.call("describe_acls", _ANY))["acls"]
        headers = (
            "Principal",
            "Host",
            "Resource type",
            "Resource",
            "Pattern",
            "Operation",
            "Permission",
            "",
        )
        acl_html = table(headers, _acl_rows(call.view, acls), "ACLs") + _acl_form(call.view)
    else:
        acl_html = "<p>The authorizer is off (<code>authorizer=on</code> enables ACLs).</p>"
    state = "on" if security_.authorizer_enabled else "off"
    body = (
        f"<p>Authorizer: <strong>{esc(state)}</strong>.</p>"
        + table(("User", "SCRAM mechanisms"), user_rows, "Users")
        + _user_forms(call.view)
        + "<h2>ACLs</h2>"
        + acl_html
    )
    return page(call.view, "security", "Security", body)


def _binding(call: Call) -> dict[str, str]:
    values = {k: call.request.form.get(k, "").strip() for k in ACL_FIELDS}
    if not values["host"]:
        values["host"] = "*"
    return values


async def add_acl(call: Call) -> Response:
    binding = _binding(call)
    await call.actor.change("create_acl", binding["principal"], "create_acls", {"acls": [binding]})
    return back(url("security"), notice="ACL added")


async def delete_acl(call: Call) -> Response:
    binding = _binding(call)
    answer = await call.actor.change(
        "delete_acl", binding["principal"], "delete_acls", {"filters": [binding]}
    )
    removed = len(answer["results"][0].get("deleted") or [])
    return back(url("security"), notice=f"{removed} ACL(s) removed")


async def add_user(call: Call) -> Response:
    _require(call, Operation.ALTER, "users")
    assert call.ctx.security is not None
    name = call.request.form.get("username", "").strip()
    password = call.request.form.get("password", "")
    try:
        await offload.to_worker(call.ctx.security.credentials.set_user, name, password)
    except ValueError as exc:
        call.actor.audit("set_user", name[:255], "INVALID_REQUEST")
        raise InvalidRequest(str(exc)) from exc
    call.actor.audit("set_user", name, "ok")
    return back(url("security"), notice=f"user {name} saved")


async def delete_user(call: Call) -> Response:
    _require(call, Operation.ALTER, "users")
    assert call.ctx.security is not None
    name = call.request.form.get("username", "").strip()
    found = await offload.to_worker(call.ctx.security.credentials.delete_user, name)
    call.actor.audit("delete_user", name[:255], "ok" if found else "not_found")
    return back(url("security"), notice=f"user {name} removed" if found else f"no user {name}")
