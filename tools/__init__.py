"""Maintainers' tools: generators of committed files (``settings_page``: docs/configuration.md)."""
