"""Alembic environment: runs on the connection `reconciler.store.schema.upgrade` hands in,
or on `sqlalchemy.url` from an alembic.ini when run by the `alembic` command."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import reconciler.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)

connection = context.config.attributes.get("connection")
if connection is not None:
    context.configure(connection=connection, target_metadata=SQLModel.metadata,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=SQLModel.metadata,
                          render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
