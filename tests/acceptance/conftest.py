"""Acceptance fixtures: the acceptance suite runs against PostgreSQL only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from relay.store.engine import create_engine


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    """An engine on the test's PostgreSQL database (overrides the all-backends one)."""
    eng = create_engine(pg_url)
    yield eng
    eng.dispose()
