"""`fleet bench service`: the service at scale against the fake cloud over HTTP, as real replicas.

N groups x M instances are created in ``fleet.testing``'s HTTP server with ``L`` ms added to every call
(its fault injector's latency rule); R ``fleet serve`` processes tick them with their own AccessKeyIds, on
SQLite (R = 1) or a shared PostgreSQL (a fresh schema per run). A few groups carry a queue above their
scale-out rule so that some act. Measured: tick durations per replica (from each replica's tick log lines;
the first, cold-cache tick is reported apart), API calls per tick (the fake's request count over the
window divided by the replicas' ticks), peak RSS (VmHWM), and with R > 1 the handover after SIGKILL of one
replica (until every shard it held is held by another replica *and* has been ticked by it) and the groups
that had two writers within one tick interval (the fake's write log, by AccessKeyId).
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_TICK = re.compile(r"tick leader=(True|False) actions=(\d+) errors=(\d+) calls=(\d+) ([0-9.]+)s")
ACTING_FRACTION = 0.02  # groups whose queue is above the rule


@dataclass(frozen=True)
class BenchOptions:
    groups: int
    instances: int
    latency_ms: float
    replicas: int
    database_url: str | None
    duration_s: float = 90.0
    tick_interval_s: float = 5.0
    ttl_s: float = 15.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _yaml(opts: BenchOptions, account_id: str, group_ids: list[str], shards: int) -> str:
    lines = [
        "region: cn-chengdu",
        f'account_id: "{account_id}"',
        f"tick_interval_s: {opts.tick_interval_s}",
        f"lease: {{ttl_s: {opts.ttl_s}, shards: {shards}}}",
        "observe: {workers: 8, instances_refresh_s: 300}",
        "api: {port: 0}",
        "groups:",
    ]
    for n, gid in enumerate(group_ids):
        lines += [
            f"  - name: g{n:04d}",
            f"    scaling_group_id: {gid}",
            "    min_size: 1",
            f"    max_size: {opts.instances * 2}",
            "    scale_out: [{metric: queue_waiting_per_instance, above: 2, for: 15s}]",
            "    isolation: {enabled: false}",
        ]
    return "\n".join(lines) + "\n"


class _Replica:
    def __init__(self, index: int, cmd: list[str], env: dict[str, str], log_path: Path) -> None:
        self.index = index
        self.holder = f"bench-{index}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)  # noqa: S603
        self.peak_rss_mb: float | None = None

    def sample_rss(self) -> None:
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:
            return
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                self.peak_rss_mb = int(line.split()[1]) / 1024

    def ticks(self) -> list[tuple[int, float]]:
        """(API calls, seconds) of each tick this replica logged."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            m = _TICK.search(line)
            if m:
                out.append((int(m.group(4)), float(m.group(5))))
        return out

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


def _double_writers(writes: list[tuple[float, str, str, str, str | None]], window_s: float) -> int:
    by_group: dict[str, list[tuple[float, str]]] = {}
    for at, _product, _action, caller, group in writes:
        if group:
            by_group.setdefault(group, []).append((at, caller))
    bad = 0
    for rows in by_group.values():
        rows.sort()
        if any(b[1] != a[1] and b[0] - a[0] < window_s for a, b in zip(rows, rows[1:], strict=False)):
            bad += 1
    return bad


def _fresh_schema(url: str) -> tuple[str, Callable[[], None]]:
    """A PostgreSQL URL whose connections use a new schema (dropped afterwards); other URLs as given."""
    if not url.startswith("postgresql"):
        return url, lambda: None
    import sqlalchemy as sa

    schema = f"fleet_bench_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in url else "?"

    def drop() -> None:
        with engine.begin() as c:
            c.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()

    return f"{url}{sep}options=-csearch_path%3D{schema}", drop


def _shard_state(url: str) -> tuple[dict[str, tuple[str, datetime]], dict[str, datetime]]:
    """Shard lease holder and expiry by lease name; last history save by shard key."""
    import sqlalchemy as sa

    from fleet.service.store import leases, policy_state

    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            held = {
                r[0]: (r[1], r[2])
                for r in c.execute(sa.select(leases.c.name, leases.c.holder, leases.c.expires_at))
                if "/shard-" in r[0]
            }
            saved = {
                r[0]: r[1] for r in c.execute(sa.select(policy_state.c.service, policy_state.c.updated_at))
            }
    finally:
        engine.dispose()
    return {k: (h, e.replace(tzinfo=e.tzinfo or UTC)) for k, (h, e) in held.items()}, {
        k: v.replace(tzinfo=v.tzinfo or UTC) for k, v in saved.items()
    }


def _handover(url: str, victim: _Replica, timeout_s: float) -> float | None:
    """SIGKILL ``victim``; seconds until each shard it held is held and ticked by another replica."""
    held, _ = _shard_state(url)
    theirs = [name for name, (holder, _) in held.items() if holder == victim.holder]
    killed_at = datetime.now(UTC)
    started = time.monotonic()
    victim.stop(signal.SIGKILL)
    while time.monotonic() - started < timeout_s:
        held, saved = _shard_state(url)
        now = datetime.now(UTC)
        done = all(
            held.get(name, ("", now))[0] not in ("", victim.holder)
            and held[name][1] > now
            and saved.get(name, killed_at) > killed_at
            for name in theirs
        )
        if done:
            return time.monotonic() - started
        time.sleep(0.25)
    return None


def run(opts: BenchOptions, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    from fleet.testing.core.faults import FaultRule
    from fleet.testing.server import FakeAliyunServer

    shards = 1 if opts.replicas == 1 else 8 * opts.replicas
    with tempfile.TemporaryDirectory() as tmp, FakeAliyunServer(port=0) as server:
        cloud = server.cloud
        progress(f"creating {opts.groups} groups x {opts.instances} instances")
        group_ids = [
            cloud.create_group_for_tests(
                name=f"g{n:04d}",
                min_size=1,
                max_size=opts.instances * 2,
                desired_capacity=opts.instances,
                in_service=opts.instances,
                region_id="cn-chengdu",
            )
            for n in range(opts.groups)
        ]
        acting = set(group_ids[:: max(1, int(1 / ACTING_FRACTION))])
        stop = threading.Event()

        def publish() -> None:  # fresh queue samples every few seconds, high on the acting groups
            while not stop.is_set():
                for gid in group_ids:
                    value = 10.0 if gid in acting else 0.5
                    for iid in list(cloud.ess.groups[gid].instance_ids):
                        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, value)
                stop.wait(5)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        cloud.faults.add(FaultRule(action=None, code=None, latency_s=opts.latency_ms / 1000))
        config = Path(tmp) / "fleet.yaml"
        config.write_text(_yaml(opts, cloud.account_id, group_ids, shards))
        url, drop = _fresh_schema(opts.database_url or f"sqlite:///{Path(tmp) / 'fleet.db'}")
        replicas: list[_Replica] = []
        try:
            for i in range(opts.replicas):
                env = {
                    **os.environ,
                    "FLEET_ALIYUN_ENDPOINT": server.endpoint,
                    "ALIBABA_CLOUD_ACCESS_KEY_ID": f"bench-replica-{i}",
                    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "bench-secret",
                    "FLEET_DATABASE_URL": url,
                }
                fleet_cli = str(Path(sys.executable).with_name("fleet"))
                cmd = [fleet_cli, "serve", "-c", str(config), "--no-api", "--holder", f"bench-{i}"]
                replicas.append(_Replica(i, cmd, env, Path(tmp) / f"replica-{i}.log"))
            progress(f"{opts.replicas} replica(s) ticking for {opts.duration_s:.0f} s")
            calls_before = sum(cloud.call_counts.values())
            deadline = time.monotonic() + opts.duration_s
            while time.monotonic() < deadline:
                for r in replicas:
                    r.sample_rss()
                    if r.proc.poll() is not None:
                        raise RuntimeError(
                            f"replica {r.index} exited: {r.log_path.read_text(errors='replace')[-2000:]}"
                        )
                time.sleep(1)
            calls = sum(cloud.call_counts.values()) - calls_before
            ticks = {r.holder: r.ticks() for r in replicas}
            handover = None
            owned: dict[str, int] = {}
            if opts.replicas > 1:
                for holder, _expiry in _shard_state(url)[0].values():
                    owned[holder] = owned.get(holder, 0) + 1
                progress("SIGKILL of one replica; waiting for the handover")
                handover = _handover(url, replicas[0], timeout_s=4 * opts.ttl_s)
                time.sleep(opts.tick_interval_s)
            writes = list(cloud.writes)
        finally:
            stop.set()
            for r in replicas:
                r.stop()
            drop()
    report = _report(opts, shards, replicas, ticks, calls, handover, writes)
    report["shards_per_replica"] = owned
    return report


def _report(
    opts: BenchOptions,
    shards: int,
    replicas: list[_Replica],
    ticks: dict[str, list[tuple[int, float]]],
    calls: int,
    handover: float | None,
    writes: list[tuple[float, str, str, str, str | None]],
) -> dict[str, Any]:
    per_replica = {}
    warm: list[float] = []
    warm_calls: list[int] = []
    for holder, rows in ticks.items():
        durations = [d for _, d in rows]
        steady = durations[1:]  # the first tick reads every group's instances: reported apart
        warm += steady
        warm_calls += [c for c, _ in rows[1:]]
        per_replica[holder] = {
            "ticks": len(durations),
            "tick_cold_s": durations[0] if durations else None,
            "tick_p50_s": _pct(steady, 0.5),
            "tick_p99_s": _pct(steady, 0.99),
        }
    return {
        "groups": opts.groups,
        "instances": opts.instances,
        "latency_ms": opts.latency_ms,
        "replicas": opts.replicas,
        "shards": shards,
        "tick_p50_s": _pct(warm, 0.5),
        "tick_p99_s": _pct(warm, 0.99),
        "tick_mean_s": statistics.fmean(warm) if warm else None,
        "per_replica": per_replica,
        # per tick of one replica, after its first (cold) tick; all_calls counts the whole run, cold included
        "api_calls_per_tick": round(statistics.fmean(warm_calls), 1) if warm_calls else None,
        "api_calls_per_tick_max": max(warm_calls) if warm_calls else None,
        "all_calls": calls,
        "writes": sum(1 for w in writes if w[2] == "ScaleWithAdjustment"),
        "peak_rss_mb": max((r.peak_rss_mb or 0.0) for r in replicas) if replicas else None,
        "peak_rss_mb_per_replica": {r.holder: r.peak_rss_mb for r in replicas},
        "handover_s": handover,
        "double_writers": _double_writers(writes, opts.tick_interval_s),
    }


def main_json(opts: BenchOptions) -> None:  # pragma: no cover - used by benchmarks/service_scale.py
    print(json.dumps(run(opts), indent=2))
