"""The group committer's fixed statements, run straight on the driver's cursor.

Through `Connection.execute`, one prebuilt INSERT of a handful of columns cost about as much
CPU as SQLite's own work for it (execution context, events, result set-up); the hot writes
(an intent and its state row, an attempt, a piece of evidence) are always the same statements
with the same columns. So each is compiled once per dialect and set of columns, by SQLAlchemy
itself (the SQL and each parameter's type processing, as `Connection.execute` would apply
them), and run on the driver's cursor of the transaction's connection: the transaction, its
BEGIN and its commit (and every check hooked on them, schema.make_engine) stay SQLAlchemy's.
A driver error is raised as SQLAlchemy's (IntegrityError, OperationalError, ...), and a
connection the driver reports lost is invalidated, as `Connection.execute` would. The engine's
`before_cursor_execute` and `after_cursor_execute` listeners are called as for any statement,
with no execution context (None).

A statement this cannot run as SQLAlchemy would (Python-side column defaults to fill, or a
dialect whose parameters are neither positional nor named) goes through `Connection.execute`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Executable
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Prepared:
    sql: str
    #: Parameter names in the order of the SQL's placeholders (positional styles), else None.
    order: tuple[str, ...] | None
    processors: Mapping[str, Processor]
    compiled: SQLCompiler

    def parameters(self, params: dict[str, Any]) -> Any:
        values = self.compiled.construct_params(params)
        processed = {name: (p(values[name]) if p else values[name])
                     for name, p in self.processors.items()}
        if self.order is None:
            return processed
        return tuple(processed[name] for name in self.order)


class DriverStatements:
    """Compiled forms of statements, per set of parameter names, for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._lock = threading.Lock()
        self._prepared: dict[tuple[int, frozenset[str]], _Prepared | None] = {}

    def execute(self, conn: Connection, statement: Executable, params: dict[str, Any]) -> None:
        """Run `statement` with `params` in the transaction of `conn`."""
        key = (id(statement), frozenset(params))
        prepared = self._prepared.get(key, ...)
        if prepared is ...:
            prepared = self._prepare(statement, params)
            with self._lock:
                self._prepared[key] = prepared
        if prepared is None:
            conn.execute(statement, params)
            return
        raw = conn.connection.dbapi_connection
        assert raw is not None
        args = prepared.parameters(params)
        cursor = raw.cursor()
        # The engine's cursor events still hear of the statement (what counts statements and
        # writes, bench.sqlcount, keeps counting them), with no execution context.
        conn.dispatch.before_cursor_execute(conn, cursor, prepared.sql, args, None, False)
        try:
            cursor.execute(prepared.sql, args)
            conn.dispatch.after_cursor_execute(conn, cursor, prepared.sql, args, None, False)
        except self.dialect.loaded_dbapi.Error as exc:
            if self.dialect.is_disconnect(exc, raw, cursor):
                conn.invalidate(exc)
            raise DBAPIError.instance(prepared.sql, args, exc,
                                      self.dialect.loaded_dbapi.Error) from exc
        finally:
            cursor.close()

    def _prepare(self, statement: Executable, params: dict[str, Any]) -> _Prepared | None:
        compiled = statement.compile(dialect=self.dialect,  # type: ignore[attr-defined]
                                     column_keys=list(params))
        assert isinstance(compiled, SQLCompiler)
        if compiled.insert_prefetch or compiled.update_prefetch or compiled.postfetch:
            return None  # defaults SQLAlchemy computes or reads back around the statement
        style = self.dialect.paramstyle
        if style in ("qmark", "numeric", "format"):
            order = tuple(compiled.positiontup or ())
        elif style in ("named", "pyformat"):
            order = None
        else:
            return None
        # The type as adapted to the dialect (its date format on SQLite, say), under the name
        # the statement gives the parameter (anonymous ones numbered, as construct_params).
        processors = {name: bind.type.dialect_impl(self.dialect).bind_processor(self.dialect)
                      for bind, name in compiled.bind_names.items()}
        return _Prepared(compiled.string, order, processors, compiled)
