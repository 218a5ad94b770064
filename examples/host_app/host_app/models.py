"""The host's own tables: its own declarative base and metadata, nothing of lovia-store's.

lovia-store's tables are never added to this metadata. They are migrated by
lovia-store's own Alembic lineage, and ``migrations/env.py`` hides them from
this app's autogenerate.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Customer(Base):
    __tablename__ = "customers"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)
    name: Mapped[str] = mapped_column(String(200))


class SupportTicket(Base):
    __tablename__ = "support_tickets"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    subject: Mapped[str] = mapped_column(String(200))
    # The agent conversation about this ticket, by lovia-store's session id.
    # A plain column, not a foreign key: lovia-store's migrations own its
    # tables and may rebuild them (SQLite) or drop them (a downgrade).
    agent_session_id: Mapped[str | None] = mapped_column(String(255))
