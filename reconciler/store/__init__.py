"""Where facts are kept: `sql.SqlStore` and `leases.SqlLeases` on SQLAlchemy (SQLite by
default, PostgreSQL for fleets; `schema.open_store(url)` opens one), `memory.MemoryStore` in
memory, all held to the protocols of `reconciler.core.ports`; and `journal.SqlJournal`, agent runs'
sealed event logs in the same database."""
