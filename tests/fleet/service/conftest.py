"""Fixtures for the service tests: a database URL per backend (SQLite file, and PostgreSQL when
reachable), and a local HTTP receiver on 127.0.0.1 that records POSTs and answers from a script.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

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


class Receiver:
    def __init__(self, answers=None):
        self.requests: list[dict] = []
        self.answers = list(answers or [])  # (status, json body) per request, then 200 {"errcode":0,"code":0}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                parts = urlsplit(self.path)
                with receiver._lock:
                    body = json.loads(raw or b"null")
                    receiver.requests.append(
                        {"path": parts.path, "query": parse_qs(parts.query), "body": body}
                    )
                    ok = (200, {"errcode": 0, "code": 0})
                    status, body = receiver.answers.pop(0) if receiver.answers else ok
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> type[Receiver]:
    """The Receiver class: ``with receiver(answers) as rx`` gives ``rx.url`` and ``rx.requests``."""
    return Receiver
