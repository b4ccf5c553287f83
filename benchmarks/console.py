"""Speed target of the web console (issue 20): every page answers within 200 ms with 50 groups and
10,000 decisions in the store.

The store is a SQLite file (as `fleet serve` uses by default) filled with 10,000 decisions spread over the
last 7 days across 50 groups (scale writes with their recorded inputs, isolation steps) and a few incidents;
the app is the real one from ``create_app``, asked through starlette's TestClient in this process, signed in
(so the forms and their CSRF tokens are rendered too). The figure is wall time per request, median and worst
of ``ROUNDS`` rounds; the machine is shared, so the target is checked on the median. Run by `make bench`,
never by the tests.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

PAGE_TARGET_MS = 200.0
GROUPS = 50
DECISIONS = 10_000
ROUNDS = 7
TOKEN = "bench-token"
PAGES = [
    "/console/",
    "/console/groups/group-07",
    "/console/groups/group-07?window=7d",
    "/console/incidents",
    "/console/decisions",
    "/console/decisions?since=7d&outcome=applied&reason=rule_scale_out",
]


def _fill(store, now: datetime, rng: random.Random) -> None:
    from fleet.service.store import DecisionRecord, IncidentRecord, decisions

    rows = []
    for i in range(DECISIONS):
        group = f"group-{i % GROUPS:02d}"
        at = now - timedelta(seconds=rng.uniform(0, 7 * 86400))
        if i % 5:
            target = rng.randint(2, 40)
            inputs = {
                "observed_desired": target - 1,
                "in_service": target - 1,
                "pending": 0,
                "standby": 0,
                "floor": 2,
                "ceiling": 40,
                "reasons": [
                    {
                        "code": "rule_scale_out",
                        "detail": "queue",
                        "inputs": {"desired": target + 1, "value": 3.1},
                    },
                    {"code": "floor_schedule", "detail": "day", "inputs": {"floor": 2}},
                ],
            }
            rec = DecisionRecord(
                "fleet",
                at,
                group,
                "scale",
                "scale_to",
                f"{group}:scale:{i}",
                "applied",
                reason="rule_scale_out; queue",
                target=target,
                inputs=inputs,
                client_token=f"tok-{i}",
                request_id=f"req-{i}",
            )
        else:
            rec = DecisionRecord(
                "fleet",
                at,
                group,
                "isolation",
                "enter_standby",
                f"{group}:iso:{i}",
                "applied",
                reason="enter_standby: hot",
                instance_id=f"i-{i:06d}",
                incident_id=f"inc-{i}",
                inputs={"temperature_c": 91},
                client_token=f"tok-{i}",
                request_id=f"req-{i}",
            )
        rows.append({k: v for k, v in rec.__dict__.items() if k != "id"})
    with store.begin() as c:
        c.execute(decisions.insert(), rows)
    for i in range(20):
        store.upsert_incident(
            IncidentRecord(
                id=f"inc-{i}",
                service="fleet",
                group_name=f"group-{i:02d}",
                instance_id=f"i-{i:06d}",
                state="detected" if i < 5 else "closed",
                detected_at=now - timedelta(hours=i),
                updated_at=now,
                cause="metric: gpu_overheat",
                respond_by=now + timedelta(minutes=15 - i),
                isolate_by=now + timedelta(hours=4 - i),
                closed_at=None if i < 5 else now,
            )
        )


def _status(now: datetime) -> dict:
    return {
        "lease": {"holder": "bench", "epoch": 1},
        "replica": {"holder": "bench", "leader": True, "last_tick_at": now.isoformat()},
        "groups": [
            {
                "name": f"group-{g:02d}",
                "paused": False,
                "desired": 10,
                "in_service": 9,
                "pending": 1,
                "standby": 1,
                "target": 10,
                "floor": 2,
                "ceiling": 40,
                "active_schedules": ["day"],
                "reason": "hold",
            }
            for g in range(GROUPS)
        ],
        "incidents": [{}] * 5,
    }


def main() -> int:
    warnings.filterwarnings("ignore", message=".*httpx.*")  # starlette prefers httpx2 in TestClient
    from starlette.testclient import TestClient

    from fleet.service.api import create_app
    from fleet.service.metrics import ServiceMetrics
    from fleet.service.store import open_store

    now = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        _fill(store, now, random.Random(20))
        status = _status(now)
        app = create_app(
            store=store,
            metrics=ServiceMetrics(),
            token=TOKEN,
            clock=lambda: now,
            groups=lambda: {g["name"] for g in status["groups"]},
            status=lambda: status,
            health=lambda: {},
        )
        client = TestClient(app, base_url="http://127.0.0.1:8780", follow_redirects=False)
        client.post("/console/signin", data={"name": "bench", "token": TOKEN})
        ok = True
        for path in PAGES:
            times = []
            for _ in range(ROUNDS):
                start = time.perf_counter()
                r = client.get(path)
                times.append((time.perf_counter() - start) * 1000)
                assert r.status_code == 200, (path, r.status_code)
            median = statistics.median(times)
            ok &= median <= PAGE_TARGET_MS
            size_kib = len(r.content) // 1024
            print(f"console {path}: median {median:.0f} ms, worst {max(times):.0f} ms, {size_kib} KiB")
        store.close()
    print(f"target: median under {PAGE_TARGET_MS:.0f} ms per page, {GROUPS} groups, {DECISIONS} decisions")
    print("ok" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
