"""The analysis core: a metrics window in, findings out, most important first. Pure: no I/O, no clock.

Each rule looks for one cause of high latency in the window and, when it finds it, says where (the group or
the instances), on what evidence, why in plain words, and what to change, with numbers from the sizing model
where it has them (:mod:`fleet.diagnose.fixes`). Rules read the canonical policy metrics
(``policies.metrics``) and the agent's diagnosis-only extras (:data:`fleet.diagnose.model.EXTRA_METRICS`).

Root causes before symptoms. Several causes show the same symptoms (a queue, a high P99), so the rules run in
an order and later ones skip what an earlier one explains:

1. ``metrics_missing``: an instance without the agent's metrics is left out of every other rule.
2. ``thermal_throttling`` / ``power_throttling``: a throttled node is slow; ``node_outlier`` does not repeat
   it.
3. ``cold_start``: the backlog while new instances load is theirs; queue rules look only after they are up.
4. ``kv_cache_pressure``: a batch held small by a full KV cache queues requests; when it does, the queue is
   reported as KV pressure (its fix sizes the instances too), not as ``queue_backlog`` or
   ``undersized_fleet``.
5. ``undersized_fleet``: load above what the fleet serves, sustained (the queue keeps growing or sits at the
   gateway's limit); else ``queue_backlog``: saturated GPUs with a standing queue at a load the fleet can
   carry on average ("falsely busy": the GPU looks full, the latency is waiting time).
6. ``memory_bandwidth_bound``, ``node_outlier``.

Thresholds name their source next to them; they are module constants so tests and docs can quote them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from fleet.diagnose import fixes
from fleet.diagnose.advice import (
    BUSY_CAVEAT,
    SIGNAL_TEXT,
    BandwidthSignal,
    bandwidth_signal,
    batch_advice,
    thermal_fix,
)
from fleet.diagnose.model import (
    PREEMPTIONS,
    REQUEST_RATE_RPS,
    SERVING_STATES,
    Finding,
    InstanceWindow,
    Window,
    isoformat,
)
from policies import metrics as pm

# ---- thresholds --------------------------------------------------------------------------------------------
HOT_C = 85.0  # issue 10 and the isolation rules' gpu_overheat; NVIDIA data-centre slowdown starts ~87-90 C
THROTTLED_CLOCK_RATIO = 0.9  # SM clock below 90% of its maximum is a real slowdown, not boost jitter
KV_FULL_PCT = 90.0  # "near full" (issue 10); vLLM preempts at 100%
BW_BOUND_PCT = 90.0  # memory-bandwidth utilization above ~90% (issue 10)
SATURATED_UTIL_PCT = 90.0  # "GPU utilization ~100%": nvidia-smi's busy share of time
QUEUE_PER_INSTANCE = 2.0  # waiting requests per instance that count as a queue (the example config's rule)
OUTLIER_FACTOR = 2.0  # an instance's P99 over twice its peers' median (the isolation rules' peer_factor)
OUTLIER_MIN_PEERS = 2
SUSTAINED = 0.5  # share of an instance's samples a condition must hold in
STALE_PERIODS = 4  # an agent silent for this many periods at the window's end has stopped
DEFAULT_QUEUE_LIMIT = 64  # the simulator's and a typical gateway's max waiting per instance
DEFAULT_SLO_TTFT_MS = 2000.0  # when the config names no TTFT SLO (the example fleet's SLO)
LATENCY_WINDOW_S = 60.0  # the node agent's percentile window (its last minute of finished requests)

# Signals the node agent always publishes while it and vLLM run (fleet/agent/sample.py).
AGENT_METRICS = (pm.QUEUE_WAITING, pm.REQUESTS_RUNNING, pm.KV_CACHE_USAGE_PCT)
# Signals of CloudMonitor's own GPU monitoring (acs_ecs_dashboard, the CloudMonitor agent's GPU plugin).
DASHBOARD_METRICS = (pm.GPU_UTIL_PCT, pm.GPU_TEMPERATURE_C)

THERMAL_BITS = int(pm.ThrottleReason.SW_THERMAL | pm.ThrottleReason.HW_THERMAL)
POWER_BITS = int(pm.ThrottleReason.SW_POWER_CAP | pm.ThrottleReason.HW_POWER_BRAKE)
HW_SLOWDOWN_BIT = int(pm.ThrottleReason.HW_SLOWDOWN)

# Most important first: severity, then how much of the picture the kind explains.
KIND_ORDER = (
    "metrics_missing",
    "undersized_fleet",
    "cold_start",
    "kv_cache_pressure",
    "queue_backlog",
    "thermal_throttling",
    "power_throttling",
    "node_outlier",
    "memory_bandwidth_bound",
    "gpu_xid_error",
)
KINDS = KIND_ORDER
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class _State:
    """What earlier rules established for later ones."""

    window: Window
    serving: list[InstanceWindow]
    measured: list[InstanceWindow]  # serving and publishing the agent's metrics
    explained: set[str] = field(default_factory=set)  # instances whose slowness a node finding explains
    steady_from: datetime | None = None  # queue rules look from here (after cold starts)
    kv_bound: set[str] = field(default_factory=set)
    slo_ttft_ms: float = DEFAULT_SLO_TTFT_MS


def diagnose(window: Window, instance: str | None = None) -> list[Finding]:
    """Findings for one group's window, most important first; ``instance`` keeps those that concern it."""
    w = _finite(window)
    serving = [i for i in w.instances if i.state in SERVING_STATES]
    findings: list[Finding] = []
    missing, measured = _metrics_missing(w, serving)
    findings.extend(missing)
    st = _State(
        w,
        serving,
        measured,
        slo_ttft_ms=w.group.slo_ttft_p99_ms or DEFAULT_SLO_TTFT_MS,
    )
    for rule in (
        _xid_errors,
        _throttling,
        _cold_start,
        _kv_pressure,
        _queue_and_capacity,
        _bandwidth,
        _outliers,
    ):
        findings.extend(rule(st))
    for f in findings:
        f.group = w.group.name
        f.fix = f.fix[:1].upper() + f.fix[1:]
    if instance is not None:
        findings = [f for f in findings if instance in f.scope or f.scope == [w.group.name]]
    findings.sort(key=lambda f: (_SEVERITY_RANK.get(f.severity, 9), _kind_rank(f.kind)))
    return findings


def _finite(w: Window) -> Window:
    """The window without NaN or infinite samples (a value that is not a number is a missing one)."""
    instances = [
        replace(i, metrics={m: [(t, v) for t, v in s if math.isfinite(v)] for m, s in i.metrics.items()})
        for i in w.instances
    ]
    return replace(w, instances=instances)


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


# ---- small statistics --------------------------------------------------------------------------------------
def _frac(values: Sequence[float], pred: Any) -> float:
    return sum(1 for v in values if pred(v)) / len(values) if values else 0.0


def _median(values: Iterable[float]) -> float | None:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vs) if vs else None


def _mean(values: Iterable[float]) -> float | None:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vs) / len(vs) if vs else None


def _thirds(values: Sequence[float]) -> tuple[float, float]:
    """Mean of the first and of the last third of a series."""
    n = max(1, len(values) // 3)
    return sum(values[:n]) / n, sum(values[-n:]) / n


def _corr(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 4:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


def _after(series: Sequence[tuple[datetime, float]], since: datetime | None) -> list[float]:
    return [v for t, v in series if since is None or t >= since]


def _span(w: Window) -> dict[str, str]:
    return {"start": isoformat(w.start), "end": isoformat(w.end)}


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


# ---- metrics_missing ---------------------------------------------------------------------------------------
def _metrics_missing(w: Window, serving: list[InstanceWindow]) -> tuple[list[Finding], list[InstanceWindow]]:
    """Instances that should be publishing and are not (or stopped); the rest are measured."""
    g = w.group
    period = max(1.0, g.publish_period_s)
    settle = timedelta(seconds=g.cold_start_s + 4 * period)  # still loading: not publishing yet is normal
    stale_after = timedelta(seconds=STALE_PERIODS * period)
    no_agent: list[str] = []
    stale: dict[str, str] = {}
    no_dashboard: list[str] = []
    measured: list[InstanceWindow] = []
    for inst in serving:
        agent_series = [inst.metrics.get(m) or [] for m in AGENT_METRICS]
        last = max((s[-1][0] for s in agent_series if s), default=None)
        settled = inst.created_at is None or w.end - inst.created_at >= settle
        if last is None:
            if settled:
                no_agent.append(inst.instance_id)
            continue
        if w.end - last > stale_after and settled:
            stale[inst.instance_id] = isoformat(last)
        else:
            measured.append(inst)
        if settled and not any(inst.metrics.get(m) for m in DASHBOARD_METRICS):
            no_dashboard.append(inst.instance_id)
    throttled = [e for e in w.errors if "throttl" in e.lower()]
    out: list[Finding] = []
    if not serving and not [i for i in w.instances if i.state.startswith("Pending")]:
        out.append(
            Finding(
                "metrics_missing",
                "warning",
                [g.name],
                {"window": _span(w), "instances": len(w.instances), "errors": w.errors[:5]},
                "The group has no InService instances in the window, so there is nothing to measure.",
                "Check that the scaling group is enabled and has capacity (fleet status); there is "
                "nothing to diagnose until instances serve.",
            )
        )
        return out, measured
    blind = no_agent + list(stale)
    if blind:
        share = len(blind) / max(1, len(serving))
        reason = "CloudMonitor reads were throttled" if throttled and not stale else "the node agent is not"
        explanation = (
            f"{len(blind)} of {len(serving)} serving instance(s) published none of the node agent's metrics"
            + (f" ({len(stale)} stopped during the window)" if stale else "")
            + f"; {reason}{' reporting' if reason.endswith('not') else ''}, so queue, KV-cache and latency "
            "causes cannot be seen there."
        )
        fix = (
            "Install and start the node agent on those instances (deploy/fleet-agent.service: "
            "`systemctl enable --now fleet-agent`; `fleet agent --once --json` shows one sample), give the "
            "instance RAM role cms:PutCustomMetric, and check that vLLM serves /metrics on the port "
            "the agent scrapes."
        )
        if throttled:
            fix += (
                " CloudMonitor throttled our reads: lower the read rate (fewer groups per tick, --since "
                "shorter)."
            )
        out.append(
            Finding(
                "metrics_missing",
                "critical" if share >= 0.5 else "warning",
                sorted(blind),
                {
                    "window": _span(w),
                    "missing": {m: sorted(no_agent) for m in AGENT_METRICS} if no_agent else {},
                    "stopped_at": stale,
                    "serving_instances": len(serving),
                    "errors": (throttled or w.errors)[:5],
                },
                explanation,
                fix,
            )
        )
    elif throttled and not measured:
        out.append(
            Finding(
                "metrics_missing",
                "critical",
                [g.name],
                {"window": _span(w), "errors": throttled[:5]},
                "CloudMonitor throttled the metric reads, so the window is empty.",
                "Retry later or with a shorter --since; raise the CloudMonitor API quota if it recurs.",
            )
        )
    if not blind and not out:
        out.extend(_nothing_published(w, serving))
    if no_dashboard and len(no_dashboard) == len([i for i in serving if i.instance_id not in blind]):
        out.append(
            Finding(
                "metrics_missing",
                "warning",
                sorted(no_dashboard),
                {"window": _span(w), "missing": {m: sorted(no_dashboard) for m in DASHBOARD_METRICS}},
                "CloudMonitor's own GPU metrics (utilization, temperature) are absent, so saturation and "
                "overheating cannot be judged.",
                "Install the CloudMonitor agent with GPU monitoring on the image (acs_ecs_dashboard "
                "instance_gpu_* metrics), or point the group's metrics_source at Prometheus with DCGM "
                "exporter.",
            )
        )
    return out, measured


def _nothing_published(w: Window, serving: list[InstanceWindow]) -> list[Finding]:
    """Serving instances none of which published any metric in the window, even those still within their
    cold start: CloudMonitor's own GPU metrics flow from boot, so silence everywhere means no agent and no
    GPU monitoring, not "all is well"."""
    if not serving or any(any(i.metrics.values()) for i in serving):
        return []
    g = w.group
    ids = sorted(i.instance_id for i in serving)
    young = sorted(
        i.instance_id
        for i in serving
        if i.created_at is not None and (w.end - i.created_at).total_seconds() < g.cold_start_s
    )
    expected = (*AGENT_METRICS, *DASHBOARD_METRICS)
    return [
        Finding(
            "metrics_missing",
            "critical",
            ids,
            {
                "window": _span(w),
                "missing": {m: ids for m in expected},
                "within_cold_start": young,
                "serving_instances": len(serving),
                "errors": w.errors[:5],
            },
            f"None of the {len(serving)} serving instance(s) published any vLLM or GPU metric in the window"
            + (f" ({len(young)} still within the {g.cold_start_s:.0f} s cold start)" if young else "")
            + ": no node agent and no GPU monitoring report, so nothing about latency can be diagnosed.",
            "Install and start the node agent (deploy/fleet-agent.service; `fleet agent --once --json` shows "
            "one sample) with the instance RAM role's cms:PutCustomMetric, and the CloudMonitor agent's GPU "
            "plugin (or a Prometheus metrics source with DCGM exporter); then diagnose again.",
        )
    ]


# ---- XID errors -------------------------------------------------------------------------------------------
def _xid_errors(st: _State) -> list[Finding]:
    """A hardware or reset-class XID (policies.metrics.HARDWARE_XIDS): the GPU is unusable until reset."""
    out: list[Finding] = []
    for inst in st.measured:
        seen = [(t, int(v)) for t, v in inst.metrics.get(pm.GPU_XID, ()) if int(v) in pm.HARDWARE_XIDS]
        if not seen:
            continue
        st.explained.add(inst.instance_id)
        codes = sorted({c for _, c in seen})
        out.append(
            Finding(
                "gpu_xid_error",
                "critical",
                [inst.instance_id],
                {
                    "window": {"start": isoformat(seen[0][0]), "end": isoformat(seen[-1][0])},
                    "xids": codes,
                    "samples": len(seen),
                    "gpu_util_pct_mean": _r(_mean(_after(inst.metrics.get(pm.GPU_UTIL_PCT, ()), seen[0][0]))),
                },
                f"{inst.instance_id} reported hardware XID {', '.join(map(str, codes))} (NVIDIA's catalogue: "
                "the GPU needs a reset or replacement); it serves nothing or fails the requests it gets.",
                f"Replace {inst.instance_id} (the isolation policy's xid_hardware rule: replace), or take it "
                "out of service now with fleet isolate; check the host's GPU before it returns.",
            )
        )
    return out


# ---- thermal and power throttling --------------------------------------------------------------------------
def _by_time(inst: InstanceWindow, metric: str) -> dict[datetime, float]:
    return dict(inst.metrics.get(metric, ()))


def _throttling(st: _State) -> list[Finding]:
    out: list[Finding] = []
    tpot_peers = {i.instance_id: _median(i.values(pm.TPOT_P99_MS)) for i in st.measured}
    for inst in st.measured:
        temps = _by_time(inst, pm.GPU_TEMPERATURE_C)
        masks = _by_time(inst, pm.GPU_THROTTLE_REASONS)
        clocks = _by_time(inst, pm.GPU_SM_CLOCK_RATIO)
        times = sorted(set(temps) | set(masks) | set(clocks))
        if not times:
            continue
        thermal_t: list[datetime] = []
        power_t: list[datetime] = []
        for t in times:
            temp = temps.get(t)
            mask = int(masks.get(t, 0))
            clock = clocks.get(t)
            hot = temp is not None and temp >= HOT_C
            slowed = clock is not None and clock < THROTTLED_CLOCK_RATIO
            if hot or (mask & THERMAL_BITS) or (mask & HW_SLOWDOWN_BIT and hot):
                thermal_t.append(t)
            elif (mask & POWER_BITS or mask & HW_SLOWDOWN_BIT) and (slowed or clock is None):
                power_t.append(t)
        peers = [v for k, v in tpot_peers.items() if k != inst.instance_id and v is not None]
        mine = tpot_peers.get(inst.instance_id)
        tpot = {"tpot_p99_ms": _r(mine), "peers_tpot_p99_ms": _r(_median(peers))}
        min_clock = min(clocks.values()) if clocks else None
        if len(thermal_t) >= 2:
            throttling = (min_clock is not None and min_clock < THROTTLED_CLOCK_RATIO) or any(
                int(masks.get(t, 0)) & THERMAL_BITS for t in thermal_t
            )
            st.explained.add(inst.instance_id)
            out.append(
                Finding(
                    "thermal_throttling",
                    "critical" if throttling else "warning",
                    [inst.instance_id],
                    {
                        "window": {"start": isoformat(thermal_t[0]), "end": isoformat(thermal_t[-1])},
                        "samples_hot": len(thermal_t),
                        "samples": len(times),
                        "temperature_max_c": _r(max(temps.values()) if temps else None),
                        "threshold_c": HOT_C,
                        "throttle_reasons": _names(masks.values()),
                        "sm_clock_ratio_min": _r(min_clock, 2),
                        **tpot,
                    },
                    f"{inst.instance_id}'s GPU ran at or above {HOT_C:.0f} C"
                    + (" and the driver cut its SM clock" if throttling else "")
                    + ", so every request on it runs slower; the card or its cooling is at fault, not the "
                    "load.",
                    thermal_fix(inst.instance_id),
                )
            )
        elif len(power_t) >= 2:
            powers = _by_time(inst, pm.GPU_POWER_W)
            st.explained.add(inst.instance_id)
            out.append(
                Finding(
                    "power_throttling",
                    "critical" if min_clock is not None and min_clock < THROTTLED_CLOCK_RATIO else "warning",
                    [inst.instance_id],
                    {
                        "window": {"start": isoformat(power_t[0]), "end": isoformat(power_t[-1])},
                        "samples_throttled": len(power_t),
                        "samples": len(times),
                        "throttle_reasons": _names(masks.values()),
                        "sm_clock_ratio_min": _r(min_clock, 2),
                        "power_w_max": _r(max(powers.values()) if powers else None),
                        "temperature_max_c": _r(max(temps.values()) if temps else None),
                        **tpot,
                    },
                    f"{inst.instance_id}'s GPU hit its power limit and the driver lowered its SM clock "
                    "while it was cool enough, so it serves slower than its peers.",
                    f"Check {inst.instance_id}'s enforced power limit (`nvidia-smi -q -d POWER`) and restore "
                    "the default (`nvidia-smi -pl <default>`); if it cannot be raised (a rack power cap), "
                    "isolate it per the isolation policy and lower the density on that power domain.",
                )
            )
    return out


def _names(masks: Iterable[float]) -> list[str]:
    combined = 0
    for m in masks:
        combined |= int(m)
    combined &= ~int(pm.ThrottleReason.GPU_IDLE)
    return sorted(name for name, bit in pm.THROTTLE_REASON_NAMES.items() if combined & int(bit))


# ---- cold start --------------------------------------------------------------------------------------------
def _cold_start(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    period = max(1.0, g.publish_period_s)
    new = [
        i for i in w.instances if i.created_at is not None and i.created_at >= w.start - timedelta(seconds=60)
    ]
    if not new and not w.scale_outs:
        return []
    loads: list[tuple[str, datetime, datetime | None]] = []  # (id, created, first sample)
    for inst in new:
        # Ready when vLLM answers the agent; CloudMonitor's own GPU metrics flow from boot, before the load.
        served = [s[0][0] for m in AGENT_METRICS if (s := inst.metrics.get(m))]
        loads.append((inst.instance_id, inst.created_at, min(served, default=None)))  # type: ignore[arg-type]
    if not loads:
        return []
    first_created = min(c for _, c, _ in loads)
    ready_times = [r for _, _, r in loads if r is not None]
    still_loading = [i for i, _, r in loads if r is None]
    ready_by = w.end if still_loading else max(ready_times)
    # Latency percentiles cover the agent's last minute of finished requests: wait for that to pass too.
    st.steady_from = ready_by + timedelta(seconds=2 * period + LATENCY_WINDOW_S)
    measured_cold = [(r - c).total_seconds() for _, c, r in loads if r is not None]
    measured_cold_s = _median(measured_cold)
    # SLO violations (or a queue) on the instances already serving, while the new ones loaded.
    old = [i for i in st.measured if i not in new]
    during_ttft: list[float] = []
    during_queue: list[float] = []
    for inst in old:
        for t, v in inst.metrics.get(pm.TTFT_P99_MS, ()):
            if first_created <= t <= ready_by:
                during_ttft.append(v)
        for t, v in inst.metrics.get(pm.QUEUE_WAITING, ()):
            if first_created <= t <= ready_by:
                during_queue.append(v)
    over = [v for v in during_ttft if v > st.slo_ttft_ms]
    if not during_ttft or len(over) < 2:
        return []
    cold_s = measured_cold_s or g.cold_start_s
    lead_min = math.ceil(max(cold_s, g.cold_start_s) / 60.0)
    floor_now = g.warm_floor if g.warm_floor is not None else g.min_size
    added = len(new)
    suggested_floor = (floor_now or 0) + added
    fix = (
        f"Raise the warm floor from {floor_now if floor_now is not None else 'its value'} to "
        f"{suggested_floor} (the {added} instance(s) that had to cold-start), and move the pre-warm "
        f"schedules {lead_min} min earlier than the ramp (the measured cold start is {cold_s:.0f} s"
        + (f"; set cold_start_s: {math.ceil(cold_s)} in fleet.yaml" if cold_s > g.cold_start_s + 30 else "")
        + "); a faster image (weights on local NVMe or a prefetched snapshot) shortens it."
    )
    return [
        Finding(
            "cold_start",
            "critical",
            [g.name, *sorted(i for i, _, _ in loads)],
            {
                "window": {"start": isoformat(first_created), "end": isoformat(ready_by)},
                "scale_outs": [{"at": isoformat(a), "from": x, "to": y} for a, x, y in w.scale_outs],
                "new_instances": len(loads),
                "still_loading": still_loading,
                "cold_start_s_measured": _r(measured_cold_s),
                "cold_start_s_config": g.cold_start_s,
                "ttft_p99_ms_max_while_loading": _r(max(during_ttft)),
                "samples_over_slo": len(over),
                "slo_ttft_p99_ms": st.slo_ttft_ms,
                "queue_waiting_max_while_loading": _r(max(during_queue) if during_queue else None),
                # what the service decided meanwhile (from its store, when the window has them)
                "service_decisions": [
                    {k: d.get(k) for k in ("at", "action", "target", "outcome", "reason")}
                    for d in w.decisions
                    if d.get("kind") == "scale"
                ][:5],
            },
            f"The group scaled out but the {len(loads)} new instance(s) took {cold_s:.0f} s to start "
            "serving; "
            "meanwhile the instances already up queued the extra load and P99 TTFT broke the SLO.",
            fix,
        )
    ]


# ---- KV cache pressure -------------------------------------------------------------------------------------
def _max_num_seqs(st: _State) -> int | None:
    g = st.window.group
    if g.max_num_seqs:
        return g.max_num_seqs
    d = fixes.deployment(g)
    return d.max_num_seqs if d else None


def _kv_pressure(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    seqs = _max_num_seqs(st)
    hit: list[str] = []
    ev: dict[str, Any] = {}
    for inst in st.measured:
        kv = _after(inst.metrics.get(pm.KV_CACHE_USAGE_PCT, ()), st.steady_from)
        if len(kv) < 3:
            continue
        full = _frac(kv, lambda v: v >= KV_FULL_PCT)
        waiting = inst.values(pm.QUEUE_WAITING)
        running = inst.values(pm.REQUESTS_RUNNING)
        pre = sum(inst.values(PREEMPTIONS))
        queued = _frac(waiting, lambda v: v >= 1)
        run_mean = _mean(running) or 0.0
        batch_not_full = seqs is None or run_mean < 0.9 * seqs
        if full >= SUSTAINED and batch_not_full and (queued >= 0.3 or pre > 0):
            hit.append(inst.instance_id)
            ev[inst.instance_id] = {
                "kv_cache_usage_pct_mean": _r(_mean(kv)),
                "samples_full": round(full, 2),
                "queue_waiting_mean": _r(_mean(waiting)),
                "requests_running_mean": _r(run_mean),
                "preemptions": _r(pre, 0),
            }
    if not hit:
        return []
    st.kv_bound.update(hit)
    opts = fixes.kv_options(g)
    parts = []
    if "kv_cache_tokens_fp8" in opts:
        parts.append(
            f"set --kv-cache-dtype fp8 (KV cache {opts['kv_cache_tokens']} -> {opts['kv_cache_tokens_fp8']} "
            "tokens per instance, per the sizing model)"
        )
    else:
        parts.append("set --kv-cache-dtype fp8 (about twice the tokens in the same memory)")
    if "max_model_len" in opts:
        parts.append(f"lower --max-model-len from {opts['max_model_len']} if prompts allow")
    else:
        parts.append("lower --max-model-len if prompts allow")
    parts.append("or give each instance more GPUs (a larger tensor-parallel size)")
    count, lower_bound = _measured_need(
        st, _demand_rps(st, st.measured), [i for i in st.measured if i.instance_id in hit]
    )
    if count is not None and count > len(st.serving):
        parts.append(
            f"or run {'at least ' if lower_bound else ''}{count} instance(s) instead of {len(st.serving)} "
            "(measured throughput per instance, kept at 80% load)"
        )
    else:
        parts.append("or add instances")
    share = len(hit) / max(1, len(st.measured))
    return [
        Finding(
            "kv_cache_pressure",
            "critical" if share >= 0.5 else "warning",
            [g.name] if share >= 0.5 else hit,
            {"window": _span(w), "kv_full_pct": KV_FULL_PCT, "max_num_seqs": seqs, "instances": ev},
            f"The KV cache was above {KV_FULL_PCT:.0f}% full on {len(hit)} of {len(st.measured)} instance(s) "
            "while requests waited and the batch stayed below max_num_seqs: memory for context, not compute, "
            "limits how many requests run at once.",
            "; ".join(parts[:1]) + "; " + ", ".join(parts[1:]) + ".",
        )
    ]


# ---- queue backlog and undersized fleet --------------------------------------------------------------------
def _demand_rps(st: _State, insts: Sequence[InstanceWindow]) -> float | None:
    """Offered load of ``insts``: completions per second plus how fast their queues grew."""
    total = 0.0
    seen = False
    for inst in insts:
        rate = _mean(_after(inst.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from))
        q = inst.metrics.get(pm.QUEUE_WAITING, [])
        q = [(t, v) for t, v in q if st.steady_from is None or t >= st.steady_from]
        growth = 0.0
        if len(q) >= 2:
            dt = (q[-1][0] - q[0][0]).total_seconds()
            growth = max(0.0, (q[-1][1] - q[0][1]) / dt) if dt > 0 else 0.0
        if rate is not None:
            total += rate + growth
            seen = True
    return total if seen else None


def _pinned(st: _State, insts: Sequence[InstanceWindow]) -> bool:
    """Whether any of ``insts`` had its queue at the gateway's limit (arrivals were being turned away)."""
    limit = st.window.group.queue_limit or DEFAULT_QUEUE_LIMIT
    return any(_thirds(i.values(pm.QUEUE_WAITING) or [0.0])[1] >= 0.8 * limit for i in insts)


def _measured_need(
    st: _State, demand: float | None, saturated: Sequence[InstanceWindow]
) -> tuple[int | None, bool]:
    """Instances for ``demand`` at the throughput the saturated instances showed (their completions per
    second are what one instance does flat out), and whether that is a lower bound (requests turned away)."""
    per = _mean(_mean(_after(i.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from)) or 0.0 for i in saturated)
    if not demand or not per:
        return None, False
    pinned = _pinned(st, saturated)
    need = fixes.instances_for(demand, per)
    return (max(need, len(st.serving) + 1) if pinned else need), pinned


def _tokens_per_seq(st: _State, insts: Sequence[InstanceWindow]) -> float:
    """Context tokens per running sequence: KV cache in use over the batch, else the request mix."""
    d = fixes.deployment(st.window.group)
    ratios: list[float] = []
    if d is not None:
        for inst in insts:
            kv = _by_time(inst, pm.KV_CACHE_USAGE_PCT)
            for t, n in inst.metrics.get(pm.REQUESTS_RUNNING, ()):
                if n >= 1 and t in kv:
                    ratios.append(kv[t] / 100.0 * d.kv_cache_tokens / n)
    if ratios:
        return statistics.median(ratios)
    prompt, output = fixes.request_sizes(st.window.group)
    return prompt + output / 2


def _queue_and_capacity(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    pool = [i for i in st.measured if i.instance_id not in st.kv_bound and i.instance_id not in st.explained]
    if not pool or st.kv_bound and len(st.kv_bound) * 2 >= len(st.measured):
        return []
    queue_limit = g.queue_limit or DEFAULT_QUEUE_LIMIT
    saturated: list[InstanceWindow] = []
    backlog: list[InstanceWindow] = []
    growing: list[str] = []
    pinned: list[str] = []
    ttft_over: list[float] = []
    ttft_all: list[float] = []
    for inst in pool:
        util = _after(inst.metrics.get(pm.GPU_UTIL_PCT, ()), st.steady_from)
        q = _after(inst.metrics.get(pm.QUEUE_WAITING, ()), st.steady_from)
        ttft = _after(inst.metrics.get(pm.TTFT_P99_MS, ()), st.steady_from)
        if len(q) < 4:
            continue
        ttft_all.extend(ttft)
        ttft_over.extend(v for v in ttft if v > st.slo_ttft_ms)
        busy = _frac(util, lambda v: v >= SATURATED_UTIL_PCT) >= SUSTAINED if util else False
        if busy:
            saturated.append(inst)
        if _frac(q, lambda v: v >= QUEUE_PER_INSTANCE) >= 0.3:
            backlog.append(inst)
            first, last = _thirds(q)
            if last >= 0.8 * queue_limit:
                pinned.append(inst.instance_id)
            elif (
                last >= max(2 * QUEUE_PER_INSTANCE, 1.5 * first)
                and _frac(q, lambda v: v >= QUEUE_PER_INSTANCE) >= 0.7
            ):
                growing.append(inst.instance_id)
    if not pool or not backlog:
        return []
    over_share = len(ttft_over) / len(ttft_all) if ttft_all else 0.0
    if over_share < 0.2:
        return []  # the queue exists but latency is within the SLO: not a latency problem
    sat_share = len(saturated) / len(pool)
    demand = _demand_rps(st, pool)
    rates = [_mean(_after(i.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from)) for i in pool]
    completed = sum(r for r in rates if r) if any(rates) else None
    q_means = {i.instance_id: _r(_mean(i.values(pm.QUEUE_WAITING))) for i in backlog}
    evidence: dict[str, Any] = {
        "window": {"start": isoformat(st.steady_from or w.start), "end": isoformat(w.end)},
        "instances_saturated": len(saturated),
        "instances_measured": len(pool),
        "gpu_util_threshold_pct": SATURATED_UTIL_PCT,
        "queue_waiting_mean": q_means,
        "queue_growing": growing,
        "queue_at_limit": pinned,
        "queue_limit": queue_limit,
        "ttft_p99_ms_median": _r(_median(ttft_all)),
        "ttft_samples_over_slo": round(over_share, 2),
        "slo_ttft_p99_ms": st.slo_ttft_ms,
        "completed_rps": _r(completed, 2),
        "offered_rps_estimate": _r(demand, 2),
    }
    overloaded = (len(growing) + len(pinned)) / len(pool)
    if sat_share >= 0.75 and overloaded >= 0.5:
        now_n = len(st.serving)
        rec = fixes.search_recommendation(g, demand or 0.0)
        measured_need, at_limit = _measured_need(st, demand, saturated)
        same = rec.get("same_type") if rec else None
        if isinstance(same, dict) and int(same["instances"]) <= now_n:  # type: ignore[call-overload]
            # The model says today's count would do with its settings (a larger max_num_seqs, say): the
            # settings differ from the ones measured, so size by the measured throughput and name the option.
            evidence["sizing_search_note"] = (
                f"{same['instances']} x {same['instance_type']} with max_num_seqs {same['max_num_seqs']}"
            )
            same = None
        need = same["instances"] if isinstance(same, dict) else measured_need
        if need is not None and at_limit:
            need = max(int(need), now_n + 1)  # type: ignore[call-overload]
        prompt, output = fixes.request_sizes(g)
        if isinstance(same, dict):
            count_txt = (
                f"Run {'at least ' if at_limit else ''}{need} instance(s) of {same['instance_type']} "
                f"instead of {now_n} (the sizing search for {demand:.1f} requests/s of {prompt:.0f} in / "
                f"{output:.0f} out tokens at the SLOs, with max_num_seqs {same['max_num_seqs']})"
            )
            best = rec.get("best") if rec else None
            if isinstance(best, dict) and best["instance_type"] != same["instance_type"]:
                count_txt += (
                    f"; across the catalog the cheapest is {best['instances']} x {best['instance_type']} at "
                    f"{best['cost_cny_per_hour']} CNY/h against {same['cost_cny_per_hour']} CNY/h"
                )
        elif need is not None:
            count_txt = (
                f"Run {'at least ' if at_limit else ''}{need} instance(s) instead of {now_n} (measured "
                "throughput per instance, kept at 80% load)"
            )
        else:
            count_txt = "Add instances until the queue stops growing"
        if need is not None and g.max_size is not None and need > g.max_size:
            count_txt += f"; raise max_size from {g.max_size} to at least {need}"
        if at_limit:
            count_txt += "; a lower bound: the requests turned away at the gateway are not counted"
        evidence["instances_recommended"] = need
        if rec:
            evidence["sizing_search"] = rec
        return [
            Finding(
                "undersized_fleet",
                "critical",
                [g.name],
                evidence,
                f"All the way through the window the load was more than the {now_n} instance(s) serve: GPUs "
                "stayed saturated and the queues kept growing"
                + (" up to the gateway's limit, so requests were turned away" if at_limit else "")
                + ". Bigger batches or another card will not fix a fleet that is too small.",
                count_txt + ".",
            )
        ]
    if sat_share < 0.5:
        return []
    # "Flat": completions per second barely move while the queue swings (they are at the GPUs' limit).
    flat = False
    q_cv, r_cv = [], []
    for inst in backlog:
        rates_i = _after(inst.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from)
        qs = _after(inst.metrics.get(pm.QUEUE_WAITING, ()), st.steady_from)
        if len(rates_i) >= 4 and _mean(rates_i) and _mean(qs):
            r_cv.append(statistics.pstdev(rates_i) / _mean(rates_i))  # type: ignore[operator]
            q_cv.append(statistics.pstdev(qs) / _mean(qs))  # type: ignore[operator]
    if r_cv:
        evidence["completed_rps_cv"] = round(statistics.median(r_cv), 2)
        evidence["queue_waiting_cv"] = round(statistics.median(q_cv), 2)
        flat = statistics.median(r_cv) < 0.5 * statistics.median(q_cv)
    knee = fixes.knee_batch(g, _tokens_per_seq(st, saturated))
    seqs = _max_num_seqs(st)
    per = (completed / len(pool)) if completed else None
    cap_q = None
    if per:
        # Little's law: a request may wait at most the TTFT SLO, so the queue holds throughput x SLO.
        cap_q = max(1, math.floor(per * st.slo_ttft_ms / 1000.0))
        evidence["max_waiting_recommended"] = cap_q
    parts = [
        f"cap the queue at {cap_q} waiting request(s) per instance (throughput x the TTFT SLO; beyond it, "
        "send requests to another instance or reject early)"
        if cap_q
        else "cap the queue (max waiting) at about throughput x the TTFT SLO per instance"
    ]
    batch_part = (
        batch_advice(g, backlog, st.steady_from, seqs, knee, _tokens_per_seq(st, backlog), evidence)
        if seqs and knee
        else None
    )
    if batch_part:
        parts.insert(0, batch_part)
    extra = None
    if demand and per:
        extra = max(1, math.ceil(demand / (per * fixes.TARGET_LOAD_FRACTION)) - len(pool))
        parts.append(f"or scale out by {extra} instance(s) so each runs below 80% load")
    return [
        Finding(
            "queue_backlog",
            "critical" if over_share >= 0.5 else "warning",
            [g.name] if len(backlog) * 2 >= len(pool) else sorted(i.instance_id for i in backlog),
            evidence,
            (
                "The GPUs look fully busy, but completions stayed flat while requests waited in the queue"
                if flat
                else "The GPUs look fully busy while requests waited in the queue"
            )
            + ": the latency is waiting time, not compute, so a bigger card would not help.",
            "; ".join(parts) + ".",
        )
    ]


# ---- memory bandwidth --------------------------------------------------------------------------------------
def _bandwidth(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    hit: dict[str, dict[str, Any]] = {}
    for inst in st.measured:
        if inst.instance_id in st.explained or inst.instance_id in st.kv_bound:
            continue
        bw = _by_time(inst, pm.GPU_MEM_BW_UTIL_PCT)
        tpot = _by_time(inst, pm.TPOT_P99_MS)
        run = _by_time(inst, pm.REQUESTS_RUNNING)
        if len(bw) < 3 or len(tpot) < 3:
            continue
        high = _frac(list(bw.values()), lambda v: v >= BW_BOUND_PCT)
        if high < SUSTAINED:
            continue
        common = sorted(set(tpot) & set(run))
        corr = _corr([run[t] for t in common], [tpot[t] for t in common])
        tpots = list(tpot.values())
        if g.slo_tpot_p99_ms is not None:
            violated = _frac(tpots, lambda v: v > g.slo_tpot_p99_ms) >= 0.3  # type: ignore[operator]
        else:
            violated = corr >= 0.5
        if not violated:
            continue
        hit[inst.instance_id] = {
            "mem_bw_util_pct_mean": _r(_mean(bw.values())),  # the signal named by _bandwidth_signal
            "samples_over": round(high, 2),
            "tpot_p99_ms_median": _r(_median(tpots)),
            "requests_running_mean": _r(_mean(run.values())),
            "tpot_vs_batch_correlation": round(corr, 2),
        }
    if not hit:
        return []
    seqs = _max_num_seqs(st)
    signal = bandwidth_signal(w)
    hit_insts = [i for i in st.measured if i.instance_id in hit]
    limit_ms = g.slo_tpot_p99_ms
    knee = fixes.batch_for_tpot(g, limit_ms, _tokens_per_seq(st, hit_insts)) if limit_ms else None
    batch_now = _mean(_mean(i.values(pm.REQUESTS_RUNNING)) or 0.0 for i in hit_insts) or 0.0
    parts = []
    if knee and (seqs is None or knee < seqs) and knee < batch_now:
        parts.append(
            f"lower max_num_seqs{f' from {seqs}' if seqs else ''} to {knee} to keep P99 TPOT within "
            f"{limit_ms:g} ms (the sizing model's decode time at the measured context per sequence; the "
            f"batch averaged {batch_now:.0f})"
        )
    else:
        parts.append(
            "lower max_num_seqs until P99 TPOT meets its SLO (each sequence streams the weights and its KV)"
        )
    q = fixes.quantized_tpot_ratio(g)
    if q is not None and q < 0.95:
        parts.append(
            f"serve int8 weights (about {100 * (1 - q):.0f}% less time per token, per the sizing model)"
        )
    else:
        parts.append("serve quantized weights (fewer bytes per token)")
    cards = fixes.more_bandwidth_cards(g)
    if cards:
        opts = ", ".join(f"{c['instance_type']} ({c['gpu']}, {c['bandwidth_gbps']:.0f} GB/s)" for c in cards)
        parts.append(f"or move to a card with more bandwidth: {opts}")
    else:
        parts.append("or move to a card with more memory bandwidth")
    share = len(hit) / max(1, len(st.measured))
    return [
        Finding(
            "memory_bandwidth_bound",
            "warning",
            [g.name] if share >= 0.5 else sorted(hit),
            {
                "window": _span(w),
                "signal": signal.value,
                "threshold_pct": BW_BOUND_PCT,
                "slo_tpot_p99_ms": g.slo_tpot_p99_ms,
                "max_num_seqs": seqs,
                "instances": hit,
            },
            f"{SIGNAL_TEXT[signal]} was above {BW_BOUND_PCT:.0f}% and TPOT rose with the batch: decoding "
            "looks limited by reading weights and KV cache, so more compute would not speed it up"
            + ("" if signal == BandwidthSignal.DCGM_DRAM_ACTIVE else BUSY_CAVEAT)
            + ".",
            "; ".join(parts) + ".",
        )
    ]


# ---- node outlier ------------------------------------------------------------------------------------------
_OUTLIER_METRICS = ((pm.TPOT_P99_MS, 10.0), (pm.E2E_P99_MS, 500.0), (pm.TTFT_P99_MS, 500.0))


def _outliers(st: _State) -> list[Finding]:
    out: list[Finding] = []
    pool = st.measured
    if len(pool) < OUTLIER_MIN_PEERS + 1:
        return out
    flagged: set[str] = set()
    for metric, floor in _OUTLIER_METRICS:
        # after cold starts, so that instances are compared over the same stretch of time
        med = {i.instance_id: _median(_after(i.metrics.get(metric, ()), st.steady_from)) for i in pool}
        for inst in pool:
            iid = inst.instance_id
            mine = med.get(iid)
            peers = [v for k, v in med.items() if k != iid and v is not None]
            if iid in flagged or iid in st.explained or mine is None or len(peers) < OUTLIER_MIN_PEERS:
                continue
            base = statistics.median(peers)
            if mine <= OUTLIER_FACTOR * base or mine - base < floor:
                continue
            vals = _after(inst.metrics.get(metric, ()), st.steady_from)
            sustained = _frac(vals, lambda v, b=base: v > OUTLIER_FACTOR * b)
            if sustained < SUSTAINED:
                continue
            flagged.add(iid)
            load = _mean(inst.values(pm.REQUESTS_RUNNING)) or 0.0
            load += _mean(inst.values(pm.QUEUE_WAITING)) or 0.0
            peer_loads = [
                (_mean(p.values(pm.REQUESTS_RUNNING)) or 0.0) + (_mean(p.values(pm.QUEUE_WAITING)) or 0.0)
                for p in pool
                if p.instance_id != iid
            ]
            peer_load = statistics.median(peer_loads) if peer_loads else 0.0
            imbalance = peer_load > 0 and load > 1.5 * peer_load and metric != pm.TPOT_P99_MS
            if imbalance:
                fix = (
                    f"Check the load balancer: {iid} holds {load:.1f} requests against its peers' "
                    f"{peer_load:.1f}; "
                    "use least-outstanding-requests balancing and check session affinity."
                )
                why = "it was sent more work than its peers (load balancing)"
            else:
                fix = (
                    f"Isolate {iid} (fleet isolate {iid}, or add an isolation rule {{metric: {metric}, "
                    f"peer_factor: {OUTLIER_FACTOR:g}}}) and have the host checked (GPU, PCIe/NVLink link "
                    "width, noisy neighbour); the balancer already sends it no more than its peers."
                )
                why = "it is slow on the same load as its peers (hardware or host)"
            out.append(
                Finding(
                    "node_outlier",
                    "warning",
                    [iid],
                    {
                        "window": _span(st.window),
                        "metric": metric,
                        "value_median": _r(mine),
                        "peers_median": _r(base),
                        "factor": round(mine / base, 2) if base > 0 else None,
                        "samples_over": round(sustained, 2),
                        "load": _r(load),
                        "peers_load": _r(peer_load),
                    },
                    f"{iid}'s {metric} was {mine / base if base > 0 else math.inf:.1f}x its peers' median "
                    f"through the window: {why}.",
                    fix,
                )
            )
    return out


_ACTIVITY_RE = re.compile(r'from "?(\d+)"? to "?(\d+)"?', re.IGNORECASE)


def parse_scale_out(cause: str | None) -> tuple[int, int] | None:
    """(from, to) of an ESS activity's cause when it raised the capacity (``... from "2" to "4"``)."""
    if not cause:
        return None
    m = _ACTIVITY_RE.search(cause)
    if not m:
        return None
    a, b = int(m.group(1)), int(m.group(2))
    return (a, b) if b > a else None
