"""Who takes an operator's action and what it changed: the records every operator verb of
the operations store, the console and the CLI pass around (the audit table's row is made of
them, ``relay.store.operations.store.OperationsStore.audit``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Actor:
    """Who takes an operator's action, for the audit table."""

    #: The name given at sign-in, or a script's ``X-Relay-Actor``.
    name: str
    #: ``operator`` (only operators act; kept for the record).
    role: str
    #: ``console`` or ``api``.
    via: str


@dataclass(frozen=True, slots=True)
class Changed:
    """What an operator's action selected and what it changed (0 on a dry run)."""

    matched: int
    changed: int
    #: Of ``matched``: rows past their deadline (``expires_at``), counted by a retry.
    expired: int = 0
