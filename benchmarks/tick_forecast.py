"""What the forecast costs a tick (issue 16's target: a tick with the forecast costs at most 20 % more than
today's, i.e. than the same tick with ``predictive: {mode: off}``).

Two copies of one group (20 instances, the example's scaling and isolation rules, warm floor 20 so that
neither ever scales) in one in-process fake cloud, each ticked by its own service (SQLite in memory) through
the real SDK clients: ``chat-off`` with predictive scaling off, ``chat-on`` with it ``on`` and a week of
minute demand history in its store (a daily sine, as ``fleet simulate --history-days 7`` would leave). Both
are ticked in turn at the same simulated times (every 15 s), so the shared machine's noise falls on both.

Measured per tick, CPU seconds of this process: the whole tick (observe + decide + actuate + record), the
fake cloud's own share of it (its ``handle``, answering the SDKs' requests in this process: a region's
servers do that work in production), the service's own (the rest: what the target is judged on), and the
decision alone (the service's per-group ``policies.decide``), replayed after the run on each tick's own
snapshot, history and time, the least of ``REPLAYS`` runs each. The figures are medians over the ticks;
the first ``WARMUP`` ticks (the store read of the week, the first table lookups) are left out. With
``--latency-ms L`` every cloud call takes L ms more (the fake's latency rule, as a real region's round trip
does) and the tick's wall time is measured beside its CPU: what an operator sees as the tick's duration,
where the reads wait on the network in the observe pool rather than on each other. The target is judged on
the service's own CPU (the figure that depends neither on the network nor on the fake). Run by `make bench`
(or ``python -m benchmarks.tick_forecast [--json] [--ticks N] [--inline] [--latency-ms L]``), never by the
tests; the progress bar goes to stderr, ``--json`` prints one object on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

TARGET_RATIO = 1.2  # on / off, whole tick
INSTANCES = 20
TICKS = 120
WARMUP = 4
TICK_S = 15
HISTORY_DAYS = 7
MEAN_RPS = 15.0
REPLAYS = 5

GROUP = """\
  - name: {name}
    scaling_group_id: {gid}
    min_size: 2
    max_size: 40
    warm_floor: {instances}
    cold_start_s: 180
    scale_out:
      - {{metric: queue_waiting_per_instance, above: 2, for: 30s, target: 4}}
      - {{metric: ttft_p99_ms, above: 800, for: 60s}}
    scale_in:
      - {{metric: queue_waiting_per_instance, below: 0.5, for: 10m}}
      - {{metric: ttft_p99_ms, below: 400, for: 10m}}
    stabilization: {{scale_in_window: 10m, max_step_down: 1, stale_after: 2m}}
    predictive: {{mode: {mode}, capacity_rps: 1.0, horizon: 5m, headroom: 0.5, history: 7d}}
    isolation:
      rules:
        - {{name: gpu_overheat, metric: gpu_temperature_c, above: 85, for: 2m, action: reboot}}
        - {{name: latency_outlier, metric: ttft_p99_ms, peer_factor: 3, for: 5m, min_value: 200,
           action: hold}}
"""


def demand_at(t_s: float) -> float:
    """Requests/s of the whole group at epoch second ``t_s``: a day's sine around the mean."""
    return MEAN_RPS * (1.0 + 0.3 * math.sin(2 * math.pi * t_s / 86400.0))


class _Timed:
    """Wraps a bound method, summing the CPU seconds of its calls."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.cpu_s = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.cpu_s += time.process_time() - start


class _ServerSide:
    """Wraps the fake cloud's ``handle``: the CPU seconds it spends answering, summed over every thread that
    calls it (the observe pool's too). In production a region's servers do that work, not the service."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.cpu_s = 0.0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            spent = time.thread_time() - start
            with self._lock:
                self.cpu_s += spent


class _Captured:
    """Wraps the service's ``_decide``: remembers each call's arguments to replay them afterwards."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.fn(*args, **kwargs)

    def replay(self, k: int) -> float:
        """The CPU seconds of call ``k`` again, the least of ``REPLAYS`` runs (the machine is shared)."""
        args, kwargs = self.calls[k]
        best = math.inf
        for _ in range(REPLAYS):
            start = time.process_time()
            self.fn(*args, **kwargs)
            best = min(best, time.process_time() - start)
        return best


def _publish(cloud: Any, ids: list[str], rps: float) -> None:
    for iid in ids:
        dims = {"instanceId": iid}
        cloud.put_custom_metric("vllm_num_requests_waiting", dims, 0.5)
        cloud.put_custom_metric("vllm_num_requests_running", dims, 4.0)
        cloud.put_custom_metric("vllm_ttft_p99_ms", dims, 450.0)
        cloud.put_custom_metric("vllm_kv_cache_usage_pct", dims, 40.0)
        cloud.put_custom_metric("vllm_request_rate", dims, rps / len(ids))
        cloud.put_custom_metric("vllm_prompt_tokens_per_request", dims, 800.0)
        cloud.put_custom_metric("vllm_output_tokens_per_request", dims, 200.0)
        cloud.publish_metric("acs_ecs_dashboard", "instance_gpu_gpu_temperature", dims, 60)


def _service(cloud: Any, tmp: str, mode: str, inline: bool) -> tuple[Any, list[str]]:
    """One group of ``INSTANCES`` InService instances and its service (SQLite in memory)."""
    from fleet.cloud.clients import make_clients
    from fleet.cloud.retry import RetryPolicy
    from fleet.config import load_config
    from fleet.service.app import build_service
    from fleet.service.settings import ServiceSettings

    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "bench", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "bench"}
    name = f"chat-{mode}"
    gid = cloud.create_group_for_tests(
        name=name,
        min_size=2,
        max_size=40,
        desired_capacity=INSTANCES,
        in_service=INSTANCES,
        region_id="cn-chengdu",
    )
    path = Path(tmp) / f"{name}.yaml"
    head = f'region: cn-chengdu\naccount_id: "{cloud.account_id}"\ngroups:\n'
    body = GROUP.format(name=name, gid=gid, instances=INSTANCES, mode=mode)
    path.write_text(head + textwrap.dedent(body))
    config = load_config(path, env={})
    settings = ServiceSettings.from_config(config)
    if inline:
        settings = replace(settings, observe_workers=1, call_rate_limit=False)
    svc = build_service(
        config,
        make_clients(
            "cn-chengdu", cloud.account_id, retry=RetryPolicy(attempts=1, sleep=lambda s: None), env=env
        ),
        database_url="sqlite://",
        clock=cloud.now,
        settings=settings,
    )
    return svc, list(cloud.ess.groups[gid].instance_ids)


def _week(now: Any) -> list[Any]:
    """A week of minute demand before ``now``, as the store holds it after a week in production."""
    from fleet.service.demand import DemandReading, minute_of

    t = minute_of(now - timedelta(days=HISTORY_DAYS))
    rows = []
    while t < minute_of(now):
        rows.append(DemandReading(t, demand_at(t.timestamp()), 800.0, 200.0))
        t += timedelta(minutes=1)
    return rows


# Ticks per minute: the service reads some metrics once a minute (the token mix, an unruled KV-cache use),
# so one tick in four pays for them and a median over ticks leaves them out.
TICKS_PER_MINUTE = 60 // TICK_S


def _ms(values: list[float]) -> dict[str, float]:
    """Mean and median over ticks, and the tick's cost amortized over each whole minute (the median over
    minutes of their ticks' mean): what the service really spends per tick, once-a-minute reads included."""
    minutes = [
        statistics.fmean(values[i : i + TICKS_PER_MINUTE])
        for i in range(0, len(values) - TICKS_PER_MINUTE + 1, TICKS_PER_MINUTE)
    ]
    return {
        "mean_ms": round(statistics.fmean(values) * 1000, 3),
        "median_ms": round(statistics.median(values) * 1000, 3),
        "per_minute_ms": round(statistics.median(minutes or values) * 1000, 3),
    }


def measure(
    ticks: int = TICKS,
    progress: Callable[[], None] | None = None,
    inline: bool = False,
    latency_ms: float = 0.0,
) -> dict[str, Any]:
    """Tick both groups ``ticks`` times; the per-tick CPU figures of each mode (and the wall time, with
    ``latency_ms`` added to every cloud call). ``inline``: observe without threads and unthrottled, as
    ``fleet simulate`` runs the service (production observes in a pool)."""
    from fleet.testing import mock_aliyun

    modes = ("off", "on")
    cpu: dict[str, dict[str, list[float]]] = {
        m: {"tick": [], "observe": [], "decide": [], "fake": []} for m in modes
    }
    wall: dict[str, list[float]] = {m: [] for m in modes}
    errors: dict[str, list[str]] = {m: [] for m in modes}
    calls: dict[str, list[int]] = {m: [] for m in modes}
    methods: set[str] = set()
    with (
        mock_aliyun(boot_seconds=60, metric_retention_s=3600.0) as cloud,
        tempfile.TemporaryDirectory() as tmp,
    ):
        built = {m: _service(cloud, tmp, m, inline) for m in modes}
        captured = {m: _Captured(built[m][0]._decide) for m in modes}
        observing = {m: _Timed(built[m][0].observer.observe) for m in modes}
        for m in modes:
            built[m][0]._decide = captured[m]
            built[m][0].observer.observe = observing[m]
        built["on"][0].demand.write("chat-on", _week(cloud.now()))
        server = _ServerSide(cloud.handle)
        cloud.handle = server  # type: ignore[method-assign]  # the mock looks it up on every request
        if latency_ms > 0:
            cloud.inject_fault(None, code=None, latency_s=latency_ms / 1000.0)
        for k in range(WARMUP + ticks):
            at = cloud.now()
            for m in modes:
                _publish(cloud, built[m][1], demand_at(at.timestamp()))
            for m in modes if k % 2 == 0 else modes[::-1]:  # neither always goes first
                observed, answered = observing[m].cpu_s, server.cpu_s
                start, started = time.process_time(), time.perf_counter()
                result = built[m][0].tick(at)
                spent = time.process_time() - start
                took = time.perf_counter() - started
                errors[m].extend(result.errors)
                if k >= WARMUP:
                    cpu[m]["tick"].append(spent)
                    wall[m].append(took)
                    cpu[m]["observe"].append(observing[m].cpu_s - observed)
                    cpu[m]["fake"].append(server.cpu_s - answered)
                    calls[m].append(result.api_calls)
                if m == "on" and result.plan is not None:
                    methods.update(str(gp.predictive.get("forecast_method")) for gp in result.plan.groups)
            cloud.advance(TICK_S)
            if progress is not None:
                progress()
        # the decision alone: each tick's decide again, with the same snapshot, history and time
        for k in range(WARMUP, WARMUP + ticks):
            for m in modes:
                cpu[m]["decide"].append(captured[m].replay(k))
        for svc, _ in built.values():
            svc.close()

    out: dict[str, Any] = {}
    for m in modes:
        rest = [t - o for t, o in zip(cpu[m]["tick"], cpu[m]["observe"], strict=True)]
        own = [t - f for t, f in zip(cpu[m]["tick"], cpu[m]["fake"], strict=True)]
        out[m] = {
            "tick": _ms(cpu[m]["tick"]),
            "service": _ms(own),
            "fake_cloud": _ms(cpu[m]["fake"]),
            "observe": _ms(cpu[m]["observe"]),
            "tick_without_observe": _ms(rest),
            "decide": _ms(cpu[m]["decide"]),
            "wall": _ms(wall[m]),
            "api_calls_per_tick": statistics.median(calls[m]),
            "api_calls_per_tick_mean": round(statistics.fmean(calls[m]), 3),
            "errors": errors[m][:5],
        }
    parts = ("tick", "service", "fake_cloud", "observe", "tick_without_observe", "decide", "wall")
    out["ratio"] = {p: round(out["on"][p]["median_ms"] / out["off"][p]["median_ms"], 3) for p in parts}
    out["forecast_extra_ms"] = {
        p: round(out["on"][p]["median_ms"] - out["off"][p]["median_ms"], 3) for p in parts
    }
    out["ratio_per_minute"] = {
        p: round(out["on"][p]["per_minute_ms"] / out["off"][p]["per_minute_ms"], 3) for p in parts
    }
    out["forecast_methods"] = sorted(methods)
    out["observe_mode"] = "inline" if inline else "pool"
    out["latency_ms"] = latency_ms
    out["instances"] = INSTANCES
    out["ticks"] = ticks
    out["history_days"] = HISTORY_DAYS
    out["target_ratio"] = TARGET_RATIO
    # judged on the amortized figure: the once-a-minute reads are part of what the forecast costs
    out["ok"] = out["ratio_per_minute"]["service"] <= TARGET_RATIO and not errors["off"] and not errors["on"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tick_forecast", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--ticks", type=int, default=TICKS, help=f"measured ticks per mode (default {TICKS})")
    parser.add_argument(
        "--inline", action="store_true", help="observe without threads, as `fleet simulate` does"
    )
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="added to every cloud call (default 0): wall time too"
    )
    args = parser.parse_args([] if argv is None else argv)
    if args.ticks < 1:
        print("--ticks must be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.latency_ms <= 1000:
        print("--latency-ms must be between 0 and 1000", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("tick, forecast off/on"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("ticks", total=WARMUP + args.ticks)
        res = measure(
            args.ticks, progress=lambda: bar.advance(task), inline=args.inline, latency_ms=args.latency_ms
        )
    if args.json:
        print(json.dumps(res, indent=2))
        return 0 if res["ok"] else 1
    off, on = res["off"], res["on"]
    print(
        f"tick, {INSTANCES} instances, {HISTORY_DAYS} days of minute history, "
        "median CPU ms, forecast off -> on:"
    )
    labels = {
        "tick": "whole tick, the fake cloud's answers included",
        "fake_cloud": "  of which the fake cloud answering",
        "service": f"the service's own (target x{TARGET_RATIO:.2f})",
        "observe": "  of which observe (cloud reads)",
        "tick_without_observe": "  the rest (decide, store, actuate)",
        "decide": "decide alone (replayed)",
    }
    if args.latency_ms:
        labels["wall"] = f"wall time, {args.latency_ms:g} ms per cloud call"
    for part, label in labels.items():
        print(
            f"  {label:<46} {off[part]['median_ms']:7.2f} -> {on[part]['median_ms']:7.2f} "
            f"(x{res['ratio'][part]:.2f}, +{res['forecast_extra_ms'][part]:.2f} ms); per minute "
            f"{off[part]['per_minute_ms']:.2f} -> {on[part]['per_minute_ms']:.2f} "
            f"(x{res['ratio_per_minute'][part]:.2f})"
        )
    print(
        f"  cloud API calls per tick: {off['api_calls_per_tick_mean']:g} -> "
        f"{on['api_calls_per_tick_mean']:g} on average (the demand signals' CloudMonitor reads); "
        "the target is judged per minute"
    )
    for mode in ("off", "on"):
        for err in res[mode]["errors"]:
            print(f"  {mode}: tick error: {err}")
    print("ok" if res["ok"] else "MISSED")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
