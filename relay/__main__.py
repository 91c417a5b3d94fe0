"""``python -m relay`` is the ``relay`` command."""

from relay.commands.cli import main

raise SystemExit(main())
