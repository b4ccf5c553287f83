"""Alembic migrations of the service store, shipped as package data and applied by ``store.migrate``."""
