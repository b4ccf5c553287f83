"""Fixtures for the service tests: a database URL per backend (SQLite file, and PostgreSQL when reachable)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest

PG_HOST, PG_PORT = "127.0.0.1", 5432
PG_BASE_URL = f"postgresql+psycopg://postgres@{PG_HOST}:{PG_PORT}/test"


def _postgres_reason() -> str | None:
    """None when PostgreSQL answers on 127.0.0.1:5432 database `test`, else why not."""
    try:
        with socket.create_connection((PG_HOST, PG_PORT), timeout=0.5):
            pass
    except OSError as exc:
        return f"PostgreSQL not reachable on {PG_HOST}:{PG_PORT} ({exc})"
    try:
        import psycopg

        with psycopg.connect(f"host={PG_HOST} port={PG_PORT} user=postgres dbname=test", connect_timeout=2):
            pass
    except Exception as exc:  # any driver error means: cannot test against it here
        return f"PostgreSQL database 'test' unusable as user postgres ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL whose connections live in a fresh schema of database `test`, dropped afterwards."""
    reason = _postgres_reason()
    if reason is not None:
        pytest.skip(reason)
    import psycopg

    schema = f"fleet_test_{uuid.uuid4().hex[:10]}"
    dsn = f"host={PG_HOST} port={PG_PORT} user=postgres dbname=test"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """Each store test runs on a SQLite file and on PostgreSQL (skipped with the reason when unreachable)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fleet.db'}"
    return request.getfixturevalue("postgres_url")
