"""The example's tables beside the relay's: the plugin's ``relay_engine`` has the outbox, this
adds the orders table to the same database, so an order and its event share a transaction."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from orders import metadata


@pytest.fixture
def engine(relay_engine: sa.Engine) -> sa.Engine:
    metadata.create_all(relay_engine)
    return relay_engine
