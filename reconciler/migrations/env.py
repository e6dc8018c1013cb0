"""Alembic environment: runs on the connection `reconciler.store.schema.upgrade` hands in,
or on `sqlalchemy.url` from an alembic.ini when run by the `alembic` command."""

from __future__ import annotations

import logging

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import reconciler.store.tables  # noqa: F401  (registers the tables on SQLModel.metadata)


def one_line_per_migration(record: logging.LogRecord) -> bool:
    """Alembic logs each migration it runs with its docstring's first paragraph, several lines
    of prose each on every first start: keep the revision and the docstring's first line."""
    step = record.args[0] if isinstance(record.args, tuple) and record.args else None
    doc = getattr(step, "doc", None)
    if record.msg == "Running %s" and isinstance(doc, str):
        first, _, rest = doc.strip().partition("\n")
        record.args = (f"{getattr(step, 'short_log', '')}, {first}{' ...' if rest else ''}",)
    return True


# This file runs once per migration run: the filter is put on once.
_log = logging.getLogger("alembic.runtime.migration")
if one_line_per_migration.__name__ not in {getattr(f, "__name__", "") for f in _log.filters}:
    _log.addFilter(one_line_per_migration)

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
