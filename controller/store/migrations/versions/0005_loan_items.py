"""Device management: what a borrower left on a lent device — the apps they
installed and their loan's working folder — so it is removed when the loan ends.

Revision ID: 0005_loan_items
Revises: 0004_bridge_shared
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_loan_items"
down_revision = "0004_bridge_shared"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "loan_items",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(32), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("bridge_id", sa.String(32), sa.ForeignKey("bridges.id"), nullable=False),
        sa.Column("serial", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("user_id", "bridge_id", "serial", "kind", "name", name="uq_loan_items"),
    )
    op.create_index("ix_loan_items_user_id", "loan_items", ["user_id"])
    op.create_index("ix_loan_items_bridge_id", "loan_items", ["bridge_id"])


def downgrade() -> None:
    op.drop_index("ix_loan_items_bridge_id", table_name="loan_items")
    op.drop_index("ix_loan_items_user_id", table_name="loan_items")
    op.drop_table("loan_items")
