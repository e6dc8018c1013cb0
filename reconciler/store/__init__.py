"""Where facts are kept: `sql.SqlStore` and `leases.SqlLeases` on SQLAlchemy (SQLite by
default, PostgreSQL for fleets; `schema.open_store(url)` opens one), `memory.MemoryStore` in
memory, all held to the protocols of `reconciler.core.ports`; agent runs' event logs in
`journal.SqlJournal` (sealed, in the same database) or `memory_journal.MemoryJournal`; and
`kinds`, which leases and journal go with each kind of store (`leases_of`, `journal_of`)."""
