"""`python -m broker` runs the same CLI as the `tidelog` console script."""

from broker.cli.main import main

raise SystemExit(main())
