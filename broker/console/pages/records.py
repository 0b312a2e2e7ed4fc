"""The record browser: from an offset, a time, the start or the end; search by key;
produce a test record.

Records are read with `fetch` as the principal (Read on the topic), a small
`READ_CHUNK_BYTES` at a time, until the page holds `limit` records or the high
watermark is reached: the broker reads whole batches, so at most one batch beyond
what the page shows. A key search reads at most `SEARCH_BUDGET_BYTES` per page and
says where it stopped, with a link to go on from there.
"""

from __future__ import annotations

from broker.console.acting import first_error
from broker.console.base import Call, back, int_arg
from broker.console.http import Response
from broker.console.lookups import offset_of, time_ms
from broker.console.record_format import FORMATS, show, show_headers
from broker.console.render import View, esc, field, form, link, page, select, table, url, when
from protocol.batch import Record, encode_batch, iter_records

LIMITS = (10, 20, 50, 100, 200)
READ_CHUNK_BYTES = 64 * 1024
SEARCH_CHUNK_BYTES = 512 * 1024
SEARCH_BUDGET_BYTES = 8 * 1024 * 1024
STARTS = (("offset", "Offset"), ("time", "Time"), ("start", "Start"), ("end", "End"))


async def _fetch(
    call: Call, topic: str, partition: int, offset: int, max_bytes: int
) -> tuple[bytes, int]:
    """One fetch as the principal: the batches' bytes and the high watermark."""
    part = {"partition": partition, "offset": offset, "max_bytes": max_bytes}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": max_bytes,
        "local_read": False,
        "topics": [{"topic": topic, "partitions": [part]}],
    }
    [answer] = (await call.actor.call("fetch", body))["topics"][0]["partitions"]
    error = first_error([answer])
    if error is not None:
        raise error
    return bytes(answer.get("records") or b""), int(answer.get("high_watermark") or 0)


async def read_records(
    call: Call, topic: str, partition: int, offset: int, limit: int, key: bytes | None = None
) -> tuple[list[Record], int, int]:
    """Up to `limit` records from `offset` (those with `key`, if given), the offset to go
    on from, and the high watermark."""
    found: list[Record] = []
    position, high, read = offset, offset, 0
    chunk = READ_CHUNK_BYTES if key is None else SEARCH_CHUNK_BYTES
    while len(found) < limit and (key is None or read < SEARCH_BUDGET_BYTES):
        data, high = await _fetch(call, topic, partition, position, chunk)
        if not data:
            break
        read += len(data)
        for record in iter_records(data, allow_partial=True):
            if record.offset < position:
                continue  # a batch starts before the offset asked for
            position = record.offset + 1
            if key is None or record.key == key:
                found.append(record)
                if len(found) == limit:
                    break
        if position >= high:
            break
    return found, position, high


async def _start(call: Call, topic: str, partition: int, limit: int) -> int:
    how = call.request.arg("from", "start")
    if how == "offset":
        return int_arg(call, "offset", 0, 0, 2**63 - 1)
    if how == "time":
        return await offset_of(
            call, topic, partition, "offset_for_time", {"timestamp": time_ms(call)}
        )
    if how == "end":
        end = await offset_of(call, topic, partition, "list_offsets", {"spec": "latest"})
        begin = await offset_of(call, topic, partition, "list_offsets", {"spec": "earliest"})
        return max(begin, end - limit)
    return await offset_of(call, topic, partition, "list_offsets", {"spec": "earliest"})


def _browse_form(call: Call, topic: str, partition: int, limit: int, fmt: str) -> str:
    arg = call.request.arg
    action = url("topic", topic, "partition", partition, "records")
    return (
        f'<form method="get" action="{esc(action)}">'
        f"{select('From', 'from', STARTS, arg('from', 'start'))}"
        f"{field('Offset', 'offset', arg('offset'), kind='number', extra=' min=0')}"
        f"{field('Time (ms or ISO 8601)', 'time', arg('time'))}"
        f"{field('Key equals (text)', 'key', arg('key'))}"
        f"{select('Records', 'limit', [(str(n), str(n)) for n in LIMITS], str(limit))}"
        f"{select('Show as', 'format', FORMATS, fmt)}"
        '<button type="submit">Show records</button></form>'
    )


def _produce_form(view: View, topic: str, partition: int) -> str:
    inner = (
        field("Key", "key", form="p") + '<div class="f"><label for="p-value">Value</label>'
        '<textarea id="p-value" name="value" rows="2" cols="40"></textarea></div>'
        + field("Headers (name=value, comma-separated)", "headers", form="p")
    )
    action = url("topic", topic, "partition", partition, "produce")
    return "<h2>Produce a test record</h2>" + form(view, action, inner, "Produce")


async def records(call: Call) -> Response:
    topic, partition_text = call.params
    partition = int(partition_text) if partition_text.isdigit() else -1
    limit = int_arg(call, "limit", 20, 1, LIMITS[-1])
    fmt = call.request.arg("format", "text")
    fmt = fmt if fmt in dict(FORMATS) else "text"
    key_text = call.request.arg("key")
    start = await _start(call, topic, partition, limit)
    key = key_text.encode() if key_text else None
    found, next_offset, high = await read_records(call, topic, partition, start, limit, key)
    rows = [
        [
            str(r.offset),
            esc(when(r.timestamp)),
            show(r.key, fmt),
            show(r.value, fmt),
            show_headers(r.headers, fmt),
        ]
        for r in found
    ]
    more = ""
    if next_offset < high:
        again = url(
            "topic",
            topic,
            "partition",
            partition,
            "records",
            **{
                "from": "offset",
                "offset": next_offset,
                "limit": limit,
                "format": fmt,
                "key": key_text,
            },
        )
        label = "search on" if key else "next records"
        more = f"<p>{link(again, f'{label} from offset {next_offset}')}</p>"
    what = f"records with key {key_text!r}" if key else "records"
    body = (
        f"<p>{link(url('topic', topic), 'Topic ' + topic)} · "
        f"{link(url('topic', topic, 'partition', partition), 'segment map')}</p>"
        + _browse_form(call, topic, partition, limit, fmt)
        + f'<p id="range">{len(found)} {esc(what)} from offset {start}; read up to {next_offset}, '
        f"high watermark {high}.</p>"
        + table(("Offset", "Timestamp", "Key", "Value", "Headers"), rows, "Records")
        + more
        + _produce_form(call.view, topic, partition)
    )
    return page(call.view, "topics", f"{topic} partition {partition}: records", body)


def _headers(text: str) -> list[tuple[str, bytes]]:
    out = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        name, _, value = item.partition("=")
        out.append((name.strip(), value.strip().encode()))
    return out


async def produce(call: Call) -> Response:
    topic, partition_text = call.params
    partition = int(partition_text) if partition_text.isdigit() else -1
    form_ = call.request.form
    key = form_.get("key", "").encode() or None
    batch = encode_batch(
        [(key, form_.get("value", "").encode(), _headers(form_.get("headers", "")), None)],
        now_ms=call.ctx.clock_ms(),
    )
    body = {
        "acks": -1,
        "timeout_ms": 10_000,
        "topics": [{"topic": topic, "partitions": [{"partition": partition, "records": batch}]}],
    }
    answer = await call.actor.change("produce", f"{topic}/{partition}", "produce", body)
    [result] = answer["topics"][0]["partitions"]
    error = first_error([result])
    if error is not None:
        raise error
    offset = result["base_offset"]
    where = url(
        "topic", topic, "partition", partition, "records", **{"from": "offset", "offset": offset}
    )
    return back(where, notice=f"produced a record at offset {offset}")
