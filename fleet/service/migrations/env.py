"""Alembic environment: runs on the connection that ``fleet.service.store.migrate`` hands over.

There is no alembic.ini: the service applies migrations programmatically at start-up, so the connection (and
with it the database URL) always comes from the caller, never from a file that could disagree with it.
"""

from alembic import context

from fleet.service.store import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only reachable by running alembic by hand
    raise RuntimeError("run migrations through fleet.service.store.migrate(engine)")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
