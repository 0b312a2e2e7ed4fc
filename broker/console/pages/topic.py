"""One topic: its partitions, its configs with their source, and the changes to it
(alter configs, delete records before an offset, delete the topic after typing its name).
"""

from __future__ import annotations

from broker.console.acting import first_error
from broker.console.base import Call, back, int_arg
from broker.console.http import Response
from broker.console.pages.topics import parse_configs
from broker.console.render import View, esc, field, form, link, page, size, table, url
from protocol.errors import InvalidRequest, TidelogError, UnknownTopicOrPartition


async def _describe(call: Call, topic: str) -> dict[str, object]:
    [entry] = (await call.actor.call("metadata", {"topics": [topic]}))["topics"]
    error = first_error([entry])
    if error is not None:
        raise error
    return dict(entry)


def _forms(view: View, topic: str, count: int) -> str:
    alter = (
        f"{field('Set (key=value, comma-separated)', 'set', extra=' size=40')}"
        f"{field('Remove overrides (keys, comma-separated)', 'delete')}"
    )
    records = (
        f"{field('Partition', 'partition', 0, kind='number', extra=f' min=0 max={count - 1}')}"
        f"{field('Delete records before offset', 'offset', kind='number', extra=' min=0 required')}"
    )
    return (
        "<h2>Alter configs</h2>"
        + form(view, url("topic", topic, "configs"), alter, "Apply configs")
        + "<h2>Delete records</h2>"
        + form(view, url("topic", topic, "delete-records"), records, "Delete records", danger=True)
        + "<h2>Delete the topic</h2>"
        + f"<p>{link(url('topic', topic, 'delete'), 'Delete ' + topic + '…')}</p>"
    )


async def topic(call: Call) -> Response:
    [name] = call.params
    entry = await _describe(call, name)
    parts = list(entry.get("partitions") or [])  # type: ignore[call-overload]
    rows = [
        [
            link(url("topic", name, "partition", p["partition"]), p["partition"]),
            str(p["log_start_offset"]),
            str(p["high_watermark"]),
            str(p["log_end_offset"]),
            size(p["size_bytes"]),
            str(p["segments"]),
            link(url("topic", name, "partition", p["partition"], "records"), "browse"),
        ]
        for p in parts
    ]
    try:
        configs = (await call.actor.call("describe_configs", {"topic": name}))["configs"]
        config_rows = [
            [f"<code>{esc(k)}</code>", esc(v["value"]), esc(v["source"])]
            for k, v in sorted(configs.items())
        ]
        config_html = table(("Key", "Value", "Source"), config_rows, "Configs")
    except TidelogError as exc:
        config_html = f"<p>Configs: {esc(exc.code)} ({esc(exc.message)})</p>"
    body = (
        table(
            (
                "Partition",
                "Start offset",
                "High watermark",
                "End offset",
                "Size",
                "Segments",
                "Records",
            ),
            rows,
            "Partitions",
        )
        + config_html
        + _forms(call.view, name, len(parts))
    )
    return page(call.view, "topics", f"Topic {name}", body)


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


async def alter_configs(call: Call) -> Response:
    [name] = call.params
    body = {
        "topic": name,
        "set": parse_configs(call.request.form.get("set", "")),
        "delete": _keys(call.request.form.get("delete", "")),
        "validate_only": False,
    }
    await call.actor.change("alter_configs", name, "alter_configs", body)
    return back(url("topic", name), notice="configs changed")


async def delete_records(call: Call) -> Response:
    [name] = call.params
    partition = int_arg(call, "partition", 0, 0, 1_000_000)
    offset = int_arg(call, "offset", -1, -1, 2**63 - 1)
    if offset < 0:
        raise InvalidRequest("offset: give the first offset to keep")
    body = {"topics": [{"topic": name, "partitions": [{"partition": partition, "offset": offset}]}]}
    answer = await call.actor.change(
        "delete_records", f"{name}/{partition}", "delete_records", body
    )
    error = first_error(answer["topics"][0]["partitions"])
    if error is not None:
        raise error
    low = answer["topics"][0]["partitions"][0]["low_watermark"]
    return back(url("topic", name), notice=f"partition {partition} now starts at offset {low}")


async def confirm_delete(call: Call) -> Response:
    [name] = call.params
    await _describe(call, name)
    inner = (
        f"{field('Type the topic name to confirm', 'confirm', extra=' required autocomplete=off')}"
    )
    body = (
        f"<p>Deleting <strong>{esc(name)}</strong> removes all its partitions and records. "
        "This cannot be undone.</p>"
        + form(call.view, url("topic", name, "delete"), inner, "Delete topic", danger=True)
    )
    return page(call.view, "topics", f"Delete {name}?", body)


async def delete_topic(call: Call) -> Response:
    [name] = call.params
    if call.request.form.get("confirm", "") != name:
        return back(url("topic", name, "delete"), problem="the name typed does not match")
    if name not in call.ctx.manager.topics():
        raise UnknownTopicOrPartition(f"unknown topic {name!r}")
    await call.actor.change("delete_topic", name, "delete_topic", {"topic": name})
    return back(url("topics"), notice=f"deleted topic {name}")
