"""Render the Grafana dashboard's panels to a PNG with matplotlib, from a live Prometheus.

Grafana is not packaged for Debian, so docs/dashboard.png is drawn by this
script instead: it reads deploy/grafana/tidelog.json, runs every panel's PromQL
through Prometheus's `query_range` API (dashboard variables set to "All") and
plots the series in the dashboard's layout. Needs matplotlib (Debian package
`python3-matplotlib`); not imported by Tidelog itself.

    python3 deploy/grafana/render_preview.py --prometheus http://127.0.0.1:9090 \
        --minutes 5 --out docs/dashboard.png
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.parse
import urllib.request
from datetime import UTC
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).with_name("tidelog.json")
# Points per series: enough for smooth lines, few enough for a quick render.
POINTS_PER_SERIES = 120
# Legend entries per panel before the rest are dropped (a readable picture).
LEGEND_MAX_ENTRIES = 6
HTTP_TIMEOUT_S = 10.0


def _substitute(expr: str, step_s: int) -> str:
    expr = expr.replace("$__rate_interval", f"{max(4 * step_s, 15)}s")
    return re.sub(r"\$\w+", ".*", expr)


def query_range(base: str, expr: str, start: float, end: float, step_s: int) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step_s})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=HTTP_TIMEOUT_S) as r:
        answer = json.load(r)
    return answer["data"]["result"] if answer.get("status") == "success" else []


def _legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def render(base: str, minutes: float, out: Path) -> int:
    """Draw every panel; returns the number of series plotted."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels, row = [], ""
    for p in dashboard["panels"]:
        if p["type"] == "row":
            row = p["title"]
        else:
            panels.append({**p, "title": f"{row} · {p['title']}"})
    end = time.time()
    start = end - minutes * 60
    step_s = max(1, int(minutes * 60 / POINTS_PER_SERIES))
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), squeeze=False)
    fig.suptitle(f"{dashboard['title']} (rendered from Prometheus, last {minutes:g} min)")
    plotted = 0
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(f"{panel['title']} [{panel['fieldConfig']['defaults']['unit']}]", fontsize=9)
        lines = 0
        for target in panel["targets"]:
            for series in query_range(
                base, _substitute(target["expr"], step_s), start, end, step_s
            ):
                xs = [datetime.fromtimestamp(float(t), tz=UTC) for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                label = _legend(target["legendFormat"], series["metric"])
                ax.plot(xs, ys, label=label if lines < LEGEND_MAX_ENTRIES else None, lw=1.2)
                lines += 1
        plotted += lines
        if lines:
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(out, dpi=80)
    return plotted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    args = parser.parse_args()
    count = render(args.prometheus.rstrip("/"), args.minutes, args.out)
    print(f"wrote {args.out} ({count} series)")


if __name__ == "__main__":
    main()
