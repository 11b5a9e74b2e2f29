"""`python -m shardfeed` runs the CLI."""

from shardfeed.cli.main import main

raise SystemExit(main())
