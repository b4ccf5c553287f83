"""Rules about load: cold starts, a KV cache held full, and a queue that is either an undersized fleet or a
backlog at a load the fleet can carry."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fleet.diagnose import fixes
from fleet.diagnose.advice import batch_advice, cap_limits_throughput
from fleet.diagnose.model import (
    PREEMPTIONS,
    REQUEST_RATE_RPS,
    Finding,
    GroupContext,
    InstanceWindow,
    isoformat,
)
from fleet.diagnose.rules.shared import (
    AGENT_METRICS,
    DEFAULT_QUEUE_LIMIT,
    KV_FULL_PCT,
    LATENCY_WINDOW_S,
    QUEUE_PER_INSTANCE,
    SATURATED_UTIL_PCT,
    SUSTAINED,
    _after,
    _frac,
    _max_num_seqs,
    _mean,
    _median,
    _r,
    _span,
    _State,
    _thirds,
    _tokens_per_seq,
)
from policies import metrics as pm


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
        assert inst.created_at is not None  # `new` holds only instances with a creation time
        loads.append((inst.instance_id, inst.created_at, min(served) if served else None))
    if not loads:
        return []
    first_created = min(c for _, c, _ in loads)
    ready_times = [r for _, _, r in loads if r is not None]
    still_loading = [i for i, _, r in loads if r is None]
    ready_by = w.end if still_loading else max(ready_times)
    # Latency percentiles cover up to a minute of requests (a source's window): wait for that to pass too.
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
        # A preemption is the KV cache running out (vLLM preempts for nothing else), so with one the cache
        # limits the batch even when it also reached max_num_seqs.
        batch_not_full = seqs is None or run_mean < 0.9 * seqs or pre > 0
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
    preempted = sum(1 for v in ev.values() if v["preemptions"])
    return [
        Finding(
            "kv_cache_pressure",
            "critical" if share >= 0.5 else "warning",
            [g.name] if share >= 0.5 else hit,
            {"window": _span(w), "kv_full_pct": KV_FULL_PCT, "max_num_seqs": seqs, "instances": ev},
            f"The KV cache was above {KV_FULL_PCT:.0f}% full on {len(hit)} of {len(st.measured)} instance(s) "
            + (
                f"and vLLM preempted running requests on {preempted} of them to free it"
                if preempted
                else "while requests waited and the batch stayed below max_num_seqs"
            )
            + ": memory for context, not compute, limits how many requests run at once"
            + (", so a larger max_num_seqs would not help." if preempted else "."),
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


@dataclass
class _QueueScan:
    """The pool's instances sorted by what their steady-state queue and GPUs showed."""

    saturated: list[InstanceWindow] = field(default_factory=list)
    backlog: list[InstanceWindow] = field(default_factory=list)
    growing: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)
    ttft_over: list[float] = field(default_factory=list)
    ttft_all: list[float] = field(default_factory=list)


def _scan_queues(st: _State, pool: Sequence[InstanceWindow], queue_limit: float) -> _QueueScan:
    scan = _QueueScan()
    for inst in pool:
        util = _after(inst.metrics.get(pm.GPU_UTIL_PCT, ()), st.steady_from)
        q = _after(inst.metrics.get(pm.QUEUE_WAITING, ()), st.steady_from)
        ttft = _after(inst.metrics.get(pm.TTFT_P99_MS, ()), st.steady_from)
        if len(q) < 4:
            continue
        scan.ttft_all.extend(ttft)
        scan.ttft_over.extend(v for v in ttft if v > st.slo_ttft_ms)
        busy = _frac(util, lambda v: v >= SATURATED_UTIL_PCT) >= SUSTAINED if util else False
        if busy:
            scan.saturated.append(inst)
        if _frac(q, lambda v: v >= QUEUE_PER_INSTANCE) >= 0.3:
            scan.backlog.append(inst)
            first, last = _thirds(q)
            if last >= 0.8 * queue_limit:
                scan.pinned.append(inst.instance_id)
            elif (
                last >= max(2 * QUEUE_PER_INSTANCE, 1.5 * first)
                and _frac(q, lambda v: v >= QUEUE_PER_INSTANCE) >= 0.7
            ):
                scan.growing.append(inst.instance_id)
    return scan


def _queue_and_capacity(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    pool = [i for i in st.measured if i.instance_id not in st.kv_bound and i.instance_id not in st.explained]
    if not pool or st.kv_bound and len(st.kv_bound) * 2 >= len(st.measured):
        return []
    queue_limit = g.queue_limit or DEFAULT_QUEUE_LIMIT
    scan = _scan_queues(st, pool, queue_limit)
    if not pool or not scan.backlog:
        return []
    over_share = len(scan.ttft_over) / len(scan.ttft_all) if scan.ttft_all else 0.0
    if over_share < 0.2:
        return []  # the queue exists but latency is within the SLO: not a latency problem
    sat_share = len(scan.saturated) / len(pool)
    demand = _demand_rps(st, pool)
    rates = [_mean(_after(i.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from)) for i in pool]
    completed = sum(r for r in rates if r) if any(rates) else None
    q_means = {i.instance_id: _r(_mean(i.values(pm.QUEUE_WAITING))) for i in scan.backlog}
    evidence: dict[str, Any] = {
        "window": {"start": isoformat(st.steady_from or w.start), "end": isoformat(w.end)},
        "instances_saturated": len(scan.saturated),
        "instances_measured": len(pool),
        "gpu_util_threshold_pct": SATURATED_UTIL_PCT,
        "queue_waiting_mean": q_means,
        "queue_growing": scan.growing,
        "queue_at_limit": scan.pinned,
        "queue_limit": queue_limit,
        "ttft_p99_ms_median": _r(_median(scan.ttft_all)),
        "ttft_samples_over_slo": round(over_share, 2),
        "slo_ttft_p99_ms": st.slo_ttft_ms,
        "completed_rps": _r(completed, 2),
        "offered_rps_estimate": _r(demand, 2),
    }
    overloaded = (len(scan.growing) + len(scan.pinned)) / len(pool)
    # A batch held at max_num_seqs with KV room is capped by the setting: the instances have not shown what
    # they serve, so the fleet is not known to be too small; the backlog's fix raises the cap first.
    seqs = _max_num_seqs(st)
    tokens = _tokens_per_seq(st, scan.backlog)
    knee = fixes.knee_batch(g, tokens) if seqs else None
    capped = cap_limits_throughput(g, scan.backlog, st.steady_from, seqs, knee, tokens)
    if sat_share >= 0.75 and overloaded >= 0.5 and not capped:
        return _undersized_fleet(st, scan, demand, evidence)
    if sat_share < 0.5:
        return []
    return _queue_backlog(st, pool, scan, demand, completed, over_share, evidence)


def _undersized_fleet(
    st: _State, scan: _QueueScan, demand: float | None, evidence: dict[str, Any]
) -> list[Finding]:
    """Saturated GPUs and growing queues nearly everywhere: too few instances, and how many would do."""
    g = st.window.group
    now_n = len(st.serving)
    rec = fixes.search_recommendation(g, demand or 0.0)
    measured_need, at_limit = _measured_need(st, demand, scan.saturated)
    same = rec.get("same_type") if rec else None
    if isinstance(same, dict) and int(same["instances"]) <= now_n:
        # The model says today's count would do with its settings (a larger max_num_seqs, say): the
        # settings differ from the ones measured, so size by the measured throughput and name the option.
        evidence["sizing_search_note"] = (
            f"{same['instances']} x {same['instance_type']} with max_num_seqs {same['max_num_seqs']}"
        )
        same = None
    need = same["instances"] if isinstance(same, dict) else measured_need
    if need is not None and at_limit:
        need = max(int(need), now_n + 1)
    count_txt = _count_text(g, rec, same, need, now_n, demand, at_limit)
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


def _count_text(
    g: GroupContext,
    rec: dict[str, object] | None,
    same: object,
    need: Any,  # Any: an instance count from the sizing search's JSON or from the measured throughput
    now_n: int,
    demand: float | None,
    at_limit: bool,
) -> str:
    """The undersized fleet's fix: how many instances of which type, and what else must change."""
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
    return count_txt


def _flat_completions(st: _State, backlog: Sequence[InstanceWindow], evidence: dict[str, Any]) -> bool:
    """ "Flat": completions per second barely move while the queue swings (they are at the GPUs' limit)."""
    q_cv, r_cv = [], []
    for inst in backlog:
        rates_i = _after(inst.metrics.get(REQUEST_RATE_RPS, ()), st.steady_from)
        qs = _after(inst.metrics.get(pm.QUEUE_WAITING, ()), st.steady_from)
        rate_mean, queue_mean = _mean(rates_i), _mean(qs)
        if len(rates_i) >= 4 and rate_mean and queue_mean:
            r_cv.append(statistics.pstdev(rates_i) / rate_mean)
            q_cv.append(statistics.pstdev(qs) / queue_mean)
    if not r_cv:
        return False
    evidence["completed_rps_cv"] = round(statistics.median(r_cv), 2)
    evidence["queue_waiting_cv"] = round(statistics.median(q_cv), 2)
    return statistics.median(r_cv) < 0.5 * statistics.median(q_cv)


def _queue_backlog(
    st: _State,
    pool: Sequence[InstanceWindow],
    scan: _QueueScan,
    demand: float | None,
    completed: float | None,
    over_share: float,
    evidence: dict[str, Any],
) -> list[Finding]:
    """Busy GPUs with a queue but not an undersized fleet: cap the queue, mind the batch size."""
    g = st.window.group
    backlog = scan.backlog
    flat = _flat_completions(st, backlog, evidence)
    knee = fixes.knee_batch(g, _tokens_per_seq(st, scan.saturated))
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
    idle_peers = _idle_peers(st, pool, backlog)
    if idle_peers:
        # The queue is where the requests were sent, not where capacity ran out: spread them.
        evidence["instances_without_queue"] = idle_peers
        parts.insert(
            0,
            f"spread the requests: {len(idle_peers)} of {len(pool)} instance(s) had no queue meanwhile, so "
            "the balancer, not the capacity, put them there (least-outstanding-requests balancing; check "
            "session affinity)",
        )
        return [_backlog_finding(st, pool, scan, flat, over_share, evidence, parts)]
    batch_part = (
        batch_advice(g, backlog, st.steady_from, seqs, knee, _tokens_per_seq(st, backlog), evidence)
        if seqs
        else None
    )
    if batch_part:
        parts.insert(0, batch_part)
    extra = None
    if demand and per:
        extra = max(1, math.ceil(demand / (per * fixes.TARGET_LOAD_FRACTION)) - len(pool))
        parts.append(f"or scale out by {extra} instance(s) so each runs below 80% load")
    return [_backlog_finding(st, pool, scan, flat, over_share, evidence, parts)]


def _idle_peers(st: _State, pool: Sequence[InstanceWindow], backlog: Sequence[InstanceWindow]) -> list[str]:
    """The instances without a queue (under one waiting on average) when fewer than half of ``pool`` had one
    and all the others had none: the load is unevenly spread. Empty otherwise."""
    if len(backlog) * 2 >= len(pool):
        return []
    others = [i for i in pool if i not in backlog]
    means = {
        i.instance_id: _mean(_after(i.metrics.get(pm.QUEUE_WAITING, ()), st.steady_from)) for i in others
    }
    if any(m is None or m >= 1.0 for m in means.values()):
        return []
    return sorted(means)


def _backlog_finding(
    st: _State,
    pool: Sequence[InstanceWindow],
    scan: _QueueScan,
    flat: bool,
    over_share: float,
    evidence: dict[str, Any],
    parts: list[str],
) -> Finding:
    backlog = scan.backlog
    return Finding(
        "queue_backlog",
        "critical" if over_share >= 0.5 else "warning",
        [st.window.group.name] if len(backlog) * 2 >= len(pool) else sorted(i.instance_id for i in backlog),
        evidence,
        (
            "The GPUs look fully busy, but completions stayed flat while requests waited in the queue"
            if flat
            else "The GPUs look fully busy while requests waited in the queue"
        )
        + ": the latency is waiting time, not compute, so a bigger card would not help.",
        "; ".join(parts) + ".",
    )
