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

The judge's reads (an intent with its state row, its attempts, its evidence) are run the same
way (`select`): each row comes back as a named tuple of the selected columns, every value
through its type's result processor (`TypeEngine.result_processor`, given the column's type as
the driver describes it), as SQLAlchemy's `Row` would hand it. Through `Connection.execute` the
three selects cost 73 us of CPU, here 30 us (the bare `sqlite3` calls: 11 us).

A sweep's turn works on many operations at once: `IN` lists (`bindparam(..., expanding=True)`)
and `execute_many` for a batch of rows. An `IN` list is compiled once per statement and length,
by SQLAlchemy's own `construct_expanded_state` (the SQL and the expanded parameters' names, as
`Connection.execute` renders them at each execution); each element goes through its type's
processor. A sweep's turn (16 rounds concluded, 16 operations claimed, in one transaction) cost
241-283 us of CPU per operation with its eight statements through `Connection.execute`, and
168-190 us here (three alternating runs of 9,000 operations, one machine).

A statement this cannot run as SQLAlchemy would (Python-side column defaults to fill, values
rendered into the SQL at execution, an empty `IN` list, or a dialect whose parameters are
neither positional nor named) goes through `Connection.execute`.
"""

from __future__ import annotations

import threading
import weakref
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Dialect, Executable, Select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True, slots=True)
class _Prepared:
    sql: str
    #: (name, processor) in the order of the SQL's placeholders (positional styles); None for
    #: named ones, whose parameters go by `processors`.
    ordered: tuple[tuple[str, Processor], ...] | None
    processors: Mapping[str, Processor]
    compiled: SQLCompiler
    #: A select's columns: the tuple its rows come back as, and each column's result
    #: processor (set at its first run, from the driver's description of the columns).
    record: Any = None
    results: list[tuple[Processor, ...]] = field(default_factory=list)
    #: Every parameter of the statement is one the caller gives, under the same name, so
    #: `construct_params` would hand the caller's values back as they are: it is skipped.
    direct: bool = False
    #: An `IN` list's parameter and the names its elements go by in the SQL (this length's).
    expansion: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def parameters(self, params: dict[str, Any]) -> Any:
        values = params if self.direct else self.compiled.construct_params(params)
        if self.expansion:
            values = dict(values)
            for name, expanded in self.expansion:
                values.update(zip(expanded, values.pop(name), strict=True))
        if self.ordered is None:
            return {name: (p(values[name]) if p else values[name])
                    for name, p in self.processors.items()}
        # A list made in one pass, then a tuple: a generator's per-item resumption cost more.
        return tuple([p(values[name]) if p else values[name] for name, p in self.ordered])


@dataclass(frozen=True, slots=True)
class _Expanding:
    """A statement with `IN` lists (`expanding` parameters): prepared per length of each."""

    compiled: SQLCompiler
    lists: tuple[str, ...]
    by_length: dict[tuple[int, ...], _Prepared] = field(default_factory=dict)


_SHARED: weakref.WeakKeyDictionary[Dialect, DriverStatements] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


class DriverStatements:
    """Compiled forms of statements, per set of parameter names, for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._lock = threading.Lock()
        self._prepared: dict[tuple[int, frozenset[str]], _Prepared | _Expanding | None] = {}

    @classmethod
    def of(cls, dialect: Dialect) -> DriverStatements:
        """The compiled forms for `dialect` (an engine's), shared by everything that runs
        statements on that engine's connections."""
        with _SHARED_LOCK:
            shared = _SHARED.get(dialect)
            if shared is None:
                shared = _SHARED[dialect] = cls(dialect)
            return shared

    def execute(self, conn: Connection, statement: Executable, params: dict[str, Any]) -> int:
        """Run `statement` with `params` in the transaction of `conn`; the rows it changed (the
        driver's rowcount, as `CursorResult.rowcount` reports it)."""
        prepared = self._prepared_for(statement, params)
        if prepared is None:
            return int(conn.execute(statement, params).rowcount)
        count: int = self._run(conn, prepared, params, lambda cursor: cursor.rowcount)
        return count

    def execute_many(self, conn: Connection, statement: Executable,
                     batch: Sequence[dict[str, Any]]) -> None:
        """Run `statement` once for each of `batch` (the same parameter names in each), in
        the transaction of `conn`: one `executemany` on the driver's cursor."""
        if not batch:
            return
        prepared = self._prepared_for(statement, batch[0])
        if prepared is None:
            conn.execute(statement, list(batch))
            return
        self._run(conn, prepared, batch, lambda cursor: None, many=True)

    def select(self, conn: Connection, statement: Select[Any], params: dict[str, Any]
               ) -> Sequence[Any]:
        """The rows `statement` selects with `params`, in the transaction of `conn`; each row's
        values by the selected columns' keys (`row.operation_id`), as on SQLAlchemy's rows."""
        prepared = self._prepared_for(statement, params)
        if prepared is None:
            return list(conn.execute(statement, params))

        def fetch(cursor: Any) -> list[Any]:
            found = cursor.fetchall()
            if not prepared.results:
                prepared.results.append(self._result_processors(statement, cursor.description))
            processors = prepared.results[0]
            if not any(processors):
                return [prepared.record._make(row) for row in found]
            return [prepared.record._make(
                [p(v) if p else v for p, v in zip(processors, row, strict=True)])
                for row in found]

        rows: list[Any] = self._run(conn, prepared, params, fetch)
        return rows

    def _result_processors(self, statement: Select[Any], description: Sequence[Any]
                           ) -> tuple[Processor, ...]:
        columns = list(statement.selected_columns)
        if len(columns) != len(description):
            raise RuntimeError(f"{len(description)} columns came back for the {len(columns)} "
                               f"selected: {statement}")
        return tuple(column.type.dialect_impl(self.dialect).result_processor(
            self.dialect, described[1])
            for column, described in zip(columns, description, strict=True))

    def _prepared_for(self, statement: Executable, params: dict[str, Any]) -> _Prepared | None:
        key = (id(statement), frozenset(params))
        prepared = self._prepared.get(key, ...)
        if prepared is ...:
            prepared = self._prepare(statement, params)
            with self._lock:
                self._prepared[key] = prepared
        if not isinstance(prepared, _Expanding):
            return prepared
        if any(name not in params for name in prepared.lists):
            return None  # a list the statement holds itself: rendered at each execution
        lengths = tuple(len(params[name]) for name in prepared.lists)
        shaped = prepared.by_length.get(lengths)
        if shaped is None:
            if 0 in lengths:
                return None  # an empty list: SQLAlchemy renders an expression of its own
            shaped = self._expand(statement, prepared, params)
            with self._lock:
                prepared.by_length[lengths] = shaped
        return shaped

    def _run(self, conn: Connection, prepared: _Prepared, params: Any,
             fetch: Callable[[Any], Any], *, many: bool = False) -> Any:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        args = ([prepared.parameters(p) for p in params] if many
                else prepared.parameters(params))
        cursor = raw.cursor()
        # The engine's cursor events still hear of the statement (what counts statements and
        # writes, bench.sqlcount, keeps counting them), with no execution context; with no
        # listener (a listener collection is false when empty) nothing is called.
        events = conn.dispatch
        if events.before_cursor_execute:
            events.before_cursor_execute(conn, cursor, prepared.sql, args, None, many)
        try:
            if many:
                cursor.executemany(prepared.sql, args)
            else:
                cursor.execute(prepared.sql, args)
            if events.after_cursor_execute:
                events.after_cursor_execute(conn, cursor, prepared.sql, args, None, many)
            return fetch(cursor)
        except self.dialect.loaded_dbapi.Error as exc:
            if self.dialect.is_disconnect(exc, raw, cursor):
                conn.invalidate(exc)
            raise DBAPIError.instance(prepared.sql, args, exc,
                                      self.dialect.loaded_dbapi.Error) from exc
        finally:
            cursor.close()

    def _prepare(self, statement: Executable,
                 params: dict[str, Any]) -> _Prepared | _Expanding | None:
        compiled = statement.compile(dialect=self.dialect,  # type: ignore[attr-defined]
                                     column_keys=list(params))
        assert isinstance(compiled, SQLCompiler)
        # An UPDATE's postfetch columns are those it sets to a SQL expression (a count plus
        # one) or the server updates: computed by the database in the statement itself, read
        # back only by the ORM or `return_defaults()`, neither of which runs here.
        if compiled.insert_prefetch or compiled.update_prefetch or (
                getattr(compiled, "postfetch", None) and not compiled.isupdate):
            return None  # defaults SQLAlchemy computes or reads back around the statement
        if self.dialect.paramstyle not in ("qmark", "numeric", "format", "named", "pyformat"):
            return None
        if compiled.literal_execute_params or any(
                not bind.expanding for bind in compiled.post_compile_params):
            return None  # values SQLAlchemy renders into the SQL at each execution
        if compiled.post_compile_params:
            return _Expanding(compiled, tuple(compiled.bind_names[bind]
                                              for bind in compiled.post_compile_params))
        return self._prepared_as(statement, compiled, params, compiled.string,
                                 compiled.positiontup or ())

    def _expand(self, statement: Executable, expanding: _Expanding,
                params: dict[str, Any]) -> _Prepared:
        """The statement prepared for the lengths of its `IN` lists in `params`."""
        state = expanding.compiled.construct_expanded_state(params)
        return self._prepared_as(statement, expanding.compiled, params, state.statement,
                                 state.positiontup or (), state.parameter_expansion)

    def _prepared_as(self, statement: Executable, compiled: SQLCompiler,
                     params: dict[str, Any], sql: str, positions: Sequence[str],
                     expansion: Mapping[str, Sequence[str]] | None = None) -> _Prepared:
        style = self.dialect.paramstyle
        # The type as adapted to the dialect (its date format on SQLite, say), under the name
        # the statement gives the parameter (anonymous ones numbered, as construct_params);
        # an `IN` list's elements each under their own name, with the list's element type.
        processors = {name: bind.type.dialect_impl(self.dialect).bind_processor(self.dialect)
                      for bind, name in compiled.bind_names.items()}
        for name, expanded in (expansion or {}).items():
            processor = processors.pop(name)
            processors.update((element, processor) for element in expanded)
        ordered = (tuple((name, processors[name]) for name in positions)
                   if style in ("qmark", "numeric", "format") else None)
        # A select's rows: a tuple type named by its columns' keys, as `Row` names them.
        record = (namedtuple("Record", [c.key for c in statement.selected_columns])  # type: ignore[misc]
                  if isinstance(statement, Select) else None)
        named = {name: params.get(name) for name in compiled.bind_names.values()}
        direct = (set(named) == set(params)
                  and all(bind.key == name and bind.callable is None
                          for bind, name in compiled.bind_names.items())
                  and compiled.construct_params(params) == named)
        return _Prepared(sql, ordered, processors, compiled, record, direct=direct,
                         expansion=tuple((name, tuple(expanded))
                                         for name, expanded in (expansion or {}).items()))
