"""The application's first revision: its own base, beside the relay's.

Revision ID: a1f0c0ffee01
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a1f0c0ffee01"
down_revision = None
branch_labels = ("app",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("total", sa.Numeric(12, 2), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("orders")
