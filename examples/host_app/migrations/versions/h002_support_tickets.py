"""Support tickets, each with an optional lovia-store session id.

Revision ID: h002
Revises: h001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "h002"
down_revision: str | None = "h001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "support_tickets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("customer_id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(200), nullable=False),
        sa.Column("agent_session_id", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(
            ["customer_id"], ["customers.id"], name="fk_support_tickets_customer_id_customers"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_support_tickets"),
    )
    op.create_index("ix_support_tickets_customer_id", "support_tickets", ["customer_id"])


def downgrade() -> None:
    # The table's indexes go with it (MySQL refuses to drop an index a foreign key uses).
    op.drop_table("support_tickets")
