"""The `tidelog` command line: `main` builds the parser from one module per subcommand.

Every module here is a client of the broker (it talks to it over TCP through `tidelog`, or
reads a data directory offline); none is on the broker's request path.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The `tidelog` console script's entry point (`broker.cli:main`).

    Importing a subcommand's module (`broker.cli.common`, say) runs this package's
    `__init__`; the parser and every command load only when the CLI actually runs.
    """
    from broker.cli.main import main as run

    return run(argv)
