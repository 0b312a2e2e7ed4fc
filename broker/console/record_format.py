"""How the record browser shows a key, a value or a header: text, JSON (pretty) or hex.

Each is cut at `SHOWN_BYTES_MAX` (saying how much more there is), so one huge value
cannot make a huge page.
"""

from __future__ import annotations

import json

from broker.console.render import esc

FORMATS = (("text", "Text"), ("json", "JSON (pretty)"), ("hex", "Hex"))
SHOWN_BYTES_MAX = 4096


def show(data: bytes | None, fmt: str) -> str:
    """`data` as HTML in format `fmt` (`null` for a tombstone or an absent key)."""
    if data is None:
        return '<span class="muted">null</span>'
    cut, more = data[:SHOWN_BYTES_MAX], len(data) - SHOWN_BYTES_MAX
    tail = f' <span class="muted">… {more:,} more bytes</span>' if more > 0 else ""
    if fmt == "hex":
        return f"<pre>{esc(cut.hex(' '))}</pre>{tail}"
    text = cut.decode("utf-8", "replace")
    if fmt == "json" and more <= 0:
        try:
            text = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except ValueError:
            return f'<pre>{esc(text)}</pre> <span class="muted">(not JSON)</span>'
    return f"<pre>{esc(text)}</pre>{tail}"


def show_headers(headers: tuple[tuple[str, bytes | None], ...], fmt: str) -> str:
    if not headers:
        return '<span class="muted">none</span>'
    items = "".join(
        f"<li><code>{esc(name)}</code>: {show(value, 'hex' if fmt == 'hex' else 'text')}</li>"
        for name, value in headers
    )
    return f"<ul>{items}</ul>"
