"""The web console, served by the broker beside /metrics (docs/console.md).

Server-rendered HTML with a little JavaScript for live charts: no build step, no
second deployment. It acts through the broker's own API table as the logged-in
principal (`acting.py`), so every page and action is checked against the same ACLs
and audited as a client's request would be.

- `app.py`: the mount the metrics listener hands the console's paths to;
- `http.py`, `sessions.py`, `login.py`, `settings.py`: requests, sessions, logins,
  whether it runs;
- `acting.py`: the principal's calls into the API table, audited as console actions;
- `routes.py`, `base.py` and `pages/`: one module per page; `lookups.py`,
  `record_format.py` and `assignment.py` what several pages share;
- `render.py`, `templates/`, `static/`: the HTML, the stylesheet and the chart script.
"""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.console.app import Console
from broker.console.settings import ConsoleSettings


def console_for(config: BrokerConfig) -> Console | None:
    """The console `config` asks for, or None when it is off (InvalidConfig if unsafe)."""
    settings = ConsoleSettings.resolve(config)
    return None if settings is None else Console(settings)


__all__ = ["Console", "console_for"]
