"""Issue 14, items 10, 14 and 15: /healthz answers whatever the store does, bodies are bounded, request text
the store cannot hold is refused, and a failed tick logs its reason."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from fleet.service.api import MAX_BODY_BYTES, ApiServer, create_app
from fleet.service.app import TICK_JOB_ID, TickWatch, run_forever
from fleet.service.loop import TickResult
from fleet.service.metrics import ServiceMetrics
from fleet.service.store import open_store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path):
    """``served(status=...)`` -> (httpx client, store, db path) of the app on 127.0.0.1, port 0."""
    servers: list[ApiServer] = []
    path = tmp_path / "api.db"

    def make(status=lambda: {"groups": []}):
        store = open_store(f"sqlite:///{path}")
        app = create_app(
            store=store,
            metrics=ServiceMetrics(),
            token=TOKEN,
            clock=lambda: T0,
            groups=lambda: {"chat"},
            status=status,
            health=lambda: {"leader": True},
        )
        server = ApiServer(app, "127.0.0.1", 0).start()
        servers.append(server)
        return httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30), store, path

    yield make
    for server in servers:
        server.stop()


def _in_background(fn):
    done: dict[str, object] = {}

    def run():
        done["result"] = fn()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.3)  # the slow request is in its handler
    return thread, done


def _healthz_seconds(base_url: str) -> float:
    started = time.monotonic()
    r = httpx.get(f"{base_url}/healthz", timeout=10)
    assert r.status_code == 200
    return time.monotonic() - started


def test_healthz_answers_while_a_status_read_is_stuck(served):
    release = threading.Event()

    def slow_status():
        release.wait(5)  # a store read waiting on a lock
        return {"groups": []}

    client, _, _ = served(status=slow_status)
    thread, _ = _in_background(lambda: client.get("/status"))
    try:
        assert _healthz_seconds(str(client.base_url)) < 1.0
    finally:
        release.set()
        thread.join(10)


def test_healthz_answers_while_the_sqlite_file_is_locked_by_another_writer(served):
    client, store, path = served()
    blocker = sqlite3.connect(path, timeout=1, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    thread, done = _in_background(lambda: client.post("/groups/chat/pause", headers=AUTH))
    try:
        assert _healthz_seconds(str(client.base_url)) < 1.0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        thread.join(40)
    assert done["result"].status_code == 200 and store.paused_groups() == {"chat"}


def test_an_oversized_body_is_refused_before_it_is_read(served):
    client, store, _ = served()
    body = b'{"instance_id": "i-1", "reason": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}'
    r = client.post("/isolate", headers={**AUTH, "content-type": "application/json"}, content=body)
    assert r.status_code == 413
    assert store.requests() == []


def test_an_oversized_chunked_body_is_refused(served):
    client, store, _ = served()

    def chunks():
        yield b'{"instance_id": "i-1", "reason": "'
        for _ in range(40):
            yield b"x" * 4096
        yield b'"}'

    r = client.post("/isolate", headers=AUTH, content=chunks())
    assert r.status_code == 413
    assert store.requests() == []


def test_a_small_body_is_still_accepted(served):
    client, store, _ = served()
    r = client.post("/isolate", headers=AUTH, json={"instance_id": "i-1", "reason": "fan noise"})
    assert r.status_code == 202 and len(store.requests()) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"instance_id": "i-" + "x" * 80, "reason": "r"}, "instance_id must be at most 64"),
        ({"instance_id": "i-1\u0000", "reason": "r"}, "instance_id must not contain control"),
        ({"instance_id": "i-1", "reason": "bad\u0000"}, "reason must not contain NUL"),
        ({"instance_id": "i-1", "reason": "r", "actor": "a" * 300}, "actor must be at most 200"),
    ],
)
def test_isolate_text_the_store_cannot_hold_is_a_400(served, body, expected):
    client, store, _ = served()
    r = client.post("/isolate", headers=AUTH, json=body)
    assert r.status_code == 400 and expected in r.json()["error"]
    assert store.requests() == []


def test_a_body_nested_deeper_than_the_parser_goes_is_a_400_not_a_500(served):
    client, store, _ = served()
    body = b"[" * 60000  # under the body limit, deeper than json.loads recurses
    r = client.post("/isolate", headers={**AUTH, "content-type": "application/json"}, content=body)
    assert r.status_code == 400 and store.requests() == []


class _FailingService:
    """Just enough of a Service for run_forever: every tick fails with a reason."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.closed = False

    def clock(self) -> datetime:
        return datetime.now(UTC)

    def tick(self, now: datetime) -> TickResult:
        self.stop.set()
        return TickResult(at=now, leader=True, errors=["group chat: decide failed: ValueError: boom"])

    def close(self, release_lease: bool = True) -> None:
        self.closed = True


def test_a_failed_tick_in_serve_logs_its_reason(caplog):
    stop = threading.Event()
    svc = _FailingService(stop)
    with caplog.at_level(logging.INFO, logger="fleet.service"):
        run_forever(svc, 60, stop=stop, install_signals=False)  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert any("errors=1" in m for m in messages)
    assert any("decide failed: ValueError: boom" in m for m in messages)
    assert svc.closed


class _JumpingClockService:
    """Its first tick sees the wall clock step back an hour: APScheduler's next run lies an hour ahead."""

    def __init__(self, scheduler: BackgroundScheduler, stop: threading.Event) -> None:
        self.scheduler = scheduler
        self.stop = stop
        self.ticks = 0

    def clock(self) -> datetime:
        return datetime.now(UTC)

    def tick(self, now: datetime) -> TickResult:
        self.ticks += 1
        if self.ticks == 1:
            ahead = datetime.now(UTC) + timedelta(hours=1)  # what a clock stepped back an hour leaves
            self.scheduler.modify_job(TICK_JOB_ID, next_run_time=ahead)
        else:
            self.stop.set()
        return TickResult(at=now, leader=True)

    def close(self, release_lease: bool = True) -> None:
        pass


def test_the_loop_goes_on_ticking_when_the_wall_clock_steps_back(caplog):
    """Before, APScheduler's next run lay an hour ahead and the service ticked no more for that hour."""
    stop = threading.Event()
    scheduler = BackgroundScheduler(timezone=UTC)
    svc = _JumpingClockService(scheduler, stop)
    loop = threading.Thread(
        target=lambda: run_forever(svc, 0.1, stop=stop, install_signals=False, scheduler=scheduler),  # type: ignore[arg-type]
        daemon=True,
    )
    with caplog.at_level(logging.WARNING, logger="fleet.service"):
        loop.start()
        loop.join(timeout=10)
        ran = svc.ticks
        stop.set()
        loop.join(timeout=5)
    assert ran == 2
    assert any("no tick for" in r.getMessage() for r in caplog.records)


def test_a_running_tick_is_never_taken_for_a_stall():
    now = [0.0]
    watch = TickWatch(1.0, monotonic=lambda: now[0])
    watch.started()
    now[0] = 100.0
    assert watch.stalled_s() is None  # a slow tick, not a stalled schedule
    watch.finished()
    now[0] = 102.0
    assert watch.stalled_s() is None
    now[0] = 103.5
    assert watch.stalled_s() == pytest.approx(3.5)
    assert watch.stalled_s() is None  # counted afresh from the rescheduling


class _SlowService:
    """Ticks that each outlast several intervals; the second one stops the loop."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.ticks = 0

    def clock(self) -> datetime:
        return datetime.now(UTC)

    def tick(self, now: datetime) -> TickResult:
        self.ticks += 1
        time.sleep(0.5)
        if self.ticks == 2:
            self.stop.set()
        return TickResult(at=now, leader=True)

    def close(self, release_lease: bool = True) -> None:
        pass


def test_a_tick_longer_than_its_interval_is_said_once_not_at_every_skipped_run(caplog):
    """Before, APScheduler warned at every interval the tick overran ('Execution of job
    "run_forever.<locals>.job ..." skipped: maximum number of running instances reached (1)')."""
    stop = threading.Event()
    svc = _SlowService(stop)
    with caplog.at_level(logging.INFO):
        run_forever(svc, 0.1, stop=stop, install_signals=False)  # type: ignore[arg-type]
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "maximum number of running instances" in m]
    assert len([m for m in messages if "tick still running after its 0.1 s interval" in m]) == 2
