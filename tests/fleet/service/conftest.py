"""Fixtures for the service tests: a database URL per backend (SQLite file, and PostgreSQL when
reachable), and a local HTTP receiver on 127.0.0.1 that records POSTs and answers from a script.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
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
        # (status, json body) or (status, json body, headers) per request, then 200 {"errcode":0,"code":0}
        self.answers = list(answers or [])
        self.location = "/moved"  # where a 3xx answer points
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
                        {
                            "method": self.command,
                            "path": parts.path,
                            "query": parse_qs(parts.query),
                            "body": body,
                            "at": time.monotonic(),
                        }
                    )
                    ok = (200, {"errcode": 0, "code": 0})
                    status, body, *more = receiver.answers.pop(0) if receiver.answers else ok
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in (more[0] if more else {}).items():
                    self.send_header(name, value)
                if 300 <= status < 400:
                    self.send_header("location", receiver.location)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST  # noqa: N815 - a redirected POST arrives as a GET without a body

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


# -- the service role's policy: every in-process fake cloud grants only what the Terraform module grants ----


@pytest.fixture(autouse=True)
def service_role_policy(monkeypatch):
    """Each fake cloud a service test makes serves every caller only the Actions of the module's service
    policy (``fleet.cloud.permissions.SERVICE``, which tests/terraform keeps equal to
    ``alicloud_ram_policy.service``), as a service running under that role is served. A call path needing
    an Action the policy lacks is refused as RAM refuses it, and fails its test here at teardown (unless the
    test denied that Action itself, to test a denial)."""
    from fleet.cloud import permissions
    from fleet.testing.cloud import FakeCloud

    clouds: list[FakeCloud] = []
    init_state = FakeCloud._init_state

    def confined(self: FakeCloud) -> None:
        init_state(self)
        self.ram.allow_only(sorted(permissions.SERVICE))
        clouds.append(self)

    monkeypatch.setattr(FakeCloud, "_init_state", confined)
    yield
    refused = sorted(
        {d["permission"] for c in clouds for d in c.ram.denials if d["permission"] not in c.ram.denied}
    )
    assert not refused, f"the service called {refused}, which the module's service RAM policy does not grant"


# -- an in-process world: the fake cloud (mock_aliyun) and a service over it ------------------------------

SERVICE_REGION = "cn-chengdu"
SERVICE_ENV = {
    "ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value",
}


@pytest.fixture
def fake_world(tmp_path):
    """``fake_world(group_yaml, in_service=3, **service_kwargs) -> (cloud, service, group_id)``.

    The group is created in the fake with ``in_service`` InService instances; ``group_yaml`` is the group's
    policy (indented YAML under ``- name: chat``). Services share one SQLite file per test, so a second call
    with ``same_db=True`` is a restarted or second replica.
    """
    import textwrap

    from fleet.cloud.clients import make_clients
    from fleet.cloud.retry import RetryPolicy
    from fleet.config import load_config
    from fleet.service.app import build_service
    from fleet.testing import mock_aliyun

    fast = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)
    mock = mock_aliyun(boot_seconds=30)
    cloud = mock.__enter__()
    services = []
    state: dict[str, str] = {}

    def make(
        group_yaml: str,
        in_service: int = 3,
        max_size: int = 20,
        extra: str = "",
        scaling_group_id: str | None = None,
        **kwargs,
    ):
        if "group_id" not in state:
            state["group_id"] = cloud.create_group_for_tests(
                name="chat",
                min_size=1,
                max_size=max_size,
                desired_capacity=in_service,
                in_service=in_service,
                region_id=SERVICE_REGION,
            )
        gid = scaling_group_id or state["group_id"]
        text = (
            textwrap.dedent(f"""\
            region: {SERVICE_REGION}
            account_id: "{cloud.account_id}"
            groups:
              - name: chat
                scaling_group_id: {gid}
            """)
            + textwrap.indent(textwrap.dedent(group_yaml), "    ")
            + textwrap.dedent(extra)
        )
        path = tmp_path / "fleet.yaml"
        path.write_text(text)
        cfg = load_config(path, env={})
        clients = make_clients(SERVICE_REGION, cloud.account_id, retry=fast, env=SERVICE_ENV)
        kwargs.setdefault("database_url", f"sqlite:///{tmp_path / 'fleet.db'}")
        kwargs.setdefault("clock", cloud.now)
        svc = build_service(cfg, clients, **kwargs)
        services.append(svc)
        return cloud, svc, gid

    yield make
    for svc in services:
        with contextlib.suppress(Exception):
            svc.close(release_lease=False)
    mock.__exit__(None, None, None)
