"""``python -m relay`` is the ``relay`` command."""

from relay.commands import main

raise SystemExit(main())
