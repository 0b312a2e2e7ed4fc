"""Consumer groups: the list, one group (members, assignments, committed offsets and
lag), its lag over time (a JSON feed the page charts), and an offset reset.

A reset is the CLI's (`tidelog groups reset-offsets`): refused unless the group is
Empty or Dead, planned first (the dry run shows the new offsets and changes
nothing), and stored with `commit_offsets` only when the plan is executed.
"""

from __future__ import annotations

import json
from typing import Any

from broker.console.acting import first_error
from broker.console.assignment import decode_assignment
from broker.console.base import Call, int_arg
from broker.console.http import Response
from broker.console.lookups import offset_of, time_ms
from broker.console.render import View, esc, field, form, link, page, select, table, url
from protocol.errors import InvalidRequest, NonEmptyGroup

RESETTABLE_STATES = ("Empty", "Dead")
STRATEGIES = (
    ("earliest", "To earliest"),
    ("latest", "To latest"),
    ("offset", "To offset"),
    ("shift", "Shift by"),
    ("time", "To time"),
)


async def groups(call: Call) -> Response:
    answer = await call.actor.call("list_groups", {})
    rows = [
        [
            link(url("group", g["group"]), g["group"]),
            esc(g["state"]),
            esc(g.get("protocol_type") or "-"),
        ]
        for g in sorted(answer["groups"], key=lambda g: g["group"])
    ]
    body = table(("Group", "State", "Protocol type"), rows, "Consumer groups")
    return page(call.view, "groups", "Consumer groups", body)


async def _describe(call: Call, group: str) -> dict[str, Any]:
    [described] = (await call.actor.call("describe_groups", {"groups": [group]}))["groups"]
    error = first_error([described])
    if error is not None:
        raise error
    return dict(described)


async def lag_rows(call: Call, group: str) -> list[dict[str, Any]]:
    """Per partition the group committed: its offset, the high watermark, the lag."""
    answer = await call.actor.call("fetch_offsets", {"group": group, "topics": None})
    out = []
    for topic in answer["topics"]:
        for p in topic["partitions"]:
            if p.get("error") or p["offset"] < 0:
                continue
            end = await offset_of(
                call, topic["topic"], p["partition"], "list_offsets", {"spec": "latest"}
            )
            out.append(
                {
                    "topic": topic["topic"],
                    "partition": p["partition"],
                    "offset": p["offset"],
                    "end": end,
                    "lag": max(end - p["offset"], 0),
                }
            )
    return sorted(out, key=lambda r: (r["topic"], r["partition"]))


def _members(described: dict[str, Any]) -> str:
    rows = []
    for m in described["members"]:
        decoded = decode_assignment(bytes(m["assignment"]))
        if decoded is None:
            held = f"{len(m['assignment'])} bytes ({esc(described.get('protocol_type') or '?')})"
        else:
            held = esc("; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in decoded) or "none")
        rows.append([esc(m["member_id"]), esc(m["client_id"]), esc(m["client_host"]), held])
    return table(("Member", "Client id", "Host", "Assignment"), rows, "Members")


def _reset_form(view: View, group: str) -> str:
    inner = (
        f"{field('Topic (empty: every committed topic)', 'topic')}"
        f"{select('Strategy', 'strategy', STRATEGIES, 'earliest')}"
        f"{field('Offset or shift', 'value', kind='number')}"
        f"{field('Time (ms or ISO 8601)', 'time')}"
        + select("Mode", "execute", (("", "Dry run (change nothing)"), ("yes", "Execute")), "")
    )
    return "<h2>Reset offsets</h2>" + form(view, url("group", group, "reset"), inner, "Plan reset")


async def group(call: Call) -> Response:
    [name] = call.params
    described = await _describe(call, name)
    rows = [
        [
            link(url("topic", r["topic"]), r["topic"]),
            str(r["partition"]),
            str(r["offset"]),
            str(r["end"]),
            f'<span data-lag="{r["lag"]}">{r["lag"]}</span>',
        ]
        for r in await lag_rows(call, name)
    ]
    chart = (
        f'<div class="cards" data-source="{esc(url("api", "group", name, "lag"))}">'
        '<figure class="chart" data-series="lag" data-kind="gauge"><figcaption>Total lag: '
        '<span class="now">-</span></figcaption><svg role="img" aria-label="total lag over the '
        'last two minutes"></svg></figure></div>'
    )
    body = (
        f"<p>State <strong id=state>{esc(described['state'])}</strong>, generation "
        f"{described['generation']}, protocol {esc(described.get('protocol') or '-')}, "
        f"leader {esc(described.get('leader') or '-')}</p>"
        + _members(described)
        + table(
            ("Topic", "Partition", "Committed offset", "End offset", "Lag"), rows, "Offsets and lag"
        )
        + chart
        + _reset_form(call.view, name)
    )
    return page(call.view, "groups", f"Group {name}", body)


async def lag_feed(call: Call) -> Response:
    [name] = call.params
    total = sum(r["lag"] for r in await lag_rows(call, name))
    return Response(
        json.dumps({"t": 0, "values": {"lag": total}}).encode(), content_type="application/json"
    )


async def _target(call: Call, topic: str, partition: int, current: int | None) -> int:
    strategy = call.request.form.get("strategy", "earliest")
    low = await offset_of(call, topic, partition, "list_offsets", {"spec": "earliest"})
    high = await offset_of(call, topic, partition, "list_offsets", {"spec": "latest"})
    value = int_arg(call, "value", 0, -(2**62), 2**62)
    if strategy == "latest":
        target = high
    elif strategy == "offset":
        target = value
    elif strategy == "shift":
        target = (low if current is None else current) + value
    elif strategy == "time":
        found = await offset_of(
            call, topic, partition, "offset_for_time", {"timestamp": time_ms(call)}
        )
        target = high if found < 0 else found
    else:
        target = low
    return min(max(target, low), high)


async def reset(call: Call) -> Response:
    [name] = call.params
    described = await _describe(call, name)
    if described["state"] not in RESETTABLE_STATES:
        raise NonEmptyGroup(
            f"group {name} is {described['state']} with "
            f"{len(described['members'])} members: stop its consumers first"
        )
    committed = {(r["topic"], r["partition"]): r["offset"] for r in await lag_rows(call, name)}
    topic = call.request.form.get("topic", "").strip()
    if topic:
        [entry] = (await call.actor.call("metadata", {"topics": [topic]}))["topics"]
        if entry.get("error"):
            raise InvalidRequest(f"{topic}: {entry.get('message') or entry['error']}")
        targets = [(topic, p["partition"]) for p in entry["partitions"]]
    else:
        targets = sorted(committed)
    plan = {tp: await _target(call, *tp, committed.get(tp)) for tp in targets}
    execute = call.request.form.get("execute") == "yes"
    if execute and plan:
        await _commit(call, name, plan)
    rows = [
        [esc(t), str(p), str(committed.get((t, p), "-")), f'<span data-new-offset="{o}">{o}</span>']
        for (t, p), o in sorted(plan.items())
    ]
    verdict = (
        "Offsets stored."
        if execute
        else "Dry run: nothing changed (choose Execute to store these offsets)."
    )
    html = (
        f'<p id="reset-mode">{esc(verdict)}</p>'
        + table(("Topic", "Partition", "Current offset", "New offset"), rows, "Reset plan")
        + f"<p>{link(url('group', name), 'Back to the group')}</p>"
    )
    return page(call.view, "groups", f"Reset offsets of {name}", html)


async def _commit(call: Call, group: str, plan: dict[tuple[str, int], int]) -> None:
    """Store a reset plan as the group's committed offsets (a commit from outside the
    group: no generation, no member, as the CLI's)."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in sorted(plan.items()):
        by_topic.setdefault(topic, []).append(
            {"partition": partition, "offset": offset, "metadata": ""}
        )
    body = {
        "group": group,
        "generation": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
    }
    await call.actor.change("reset_offsets", group, "commit_offsets", body)
