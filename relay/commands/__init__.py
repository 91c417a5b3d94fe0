"""The ``relay`` command line: one module per command."""
