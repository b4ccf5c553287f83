"""Rules about nodes: agents that stopped publishing, XID errors, thermal and power throttling, memory
bandwidth, and an instance slower than its peers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fleet.diagnose import fixes
from fleet.diagnose.advice import BUSY_CAVEAT, SIGNAL_TEXT, BandwidthSignal, bandwidth_signal, thermal_fix
from fleet.diagnose.model import (
    Finding,
    InstanceWindow,
    Window,
    isoformat,
)
from fleet.diagnose.rules.shared import (
    AGENT_METRICS,
    BW_BOUND_PCT,
    BW_NEAR_CEILING,
    CLOCK_BELOW_PEERS,
    CLOCK_OUTLIER_FACTOR,
    DASHBOARD_METRICS,
    HOT_C,
    HW_SLOWDOWN_BIT,
    OUTLIER_FACTOR,
    OUTLIER_MIN_PEERS,
    POWER_BITS,
    STALE_PERIODS,
    SUSTAINED,
    THERMAL_BITS,
    THROTTLED_CLOCK_RATIO,
    _after,
    _by_time,
    _corr,
    _frac,
    _max_num_seqs,
    _mean,
    _median,
    _r,
    _span,
    _State,
    _tokens_per_seq,
)
from policies import metrics as pm


# ---- metrics_missing ---------------------------------------------------------------------------------------
@dataclass
class AgentCoverage:
    """Which serving instances the node agent covered: ``measured`` published through the window, the others
    never did (``no_agent``, past their cold start) or stopped (``stopped``: when, the last sample)."""

    measured: list[InstanceWindow] = field(default_factory=list)
    no_agent: list[str] = field(default_factory=list)
    stopped: dict[str, datetime] = field(default_factory=dict)
    no_dashboard: list[str] = field(default_factory=list)


def _agent_coverage(w: Window, serving: list[InstanceWindow]) -> AgentCoverage:
    """Instances that should be publishing and are not (or stopped); the rest are measured."""
    g = w.group
    period = max(1.0, g.publish_period_s)
    settle = timedelta(seconds=g.cold_start_s + 4 * period)  # still loading: not publishing yet is normal
    stale_after = timedelta(seconds=STALE_PERIODS * period)
    cov = AgentCoverage()
    for inst in serving:
        agent_series = [inst.metrics.get(m) or [] for m in AGENT_METRICS]
        last = max((s[-1][0] for s in agent_series if s), default=None)
        settled = inst.created_at is None or w.end - inst.created_at >= settle
        if last is None:
            if settled:
                cov.no_agent.append(inst.instance_id)
            continue
        if w.end - last > stale_after and settled:
            cov.stopped[inst.instance_id] = last
        else:
            cov.measured.append(inst)
        if settled and not any(inst.metrics.get(m) for m in DASHBOARD_METRICS):
            cov.no_dashboard.append(inst.instance_id)
    return cov


def _metrics_missing(st: _State, cov: AgentCoverage) -> list[Finding]:
    """The agent's and CloudMonitor's metrics that are missing. An agent that stopped after a node fault the
    node rules reported (``st.stopped_by_fault``) is that finding's consequence, not a missing agent."""
    w = st.window
    g = w.group
    serving = st.serving
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
        return out
    blind = cov.no_agent + list(cov.stopped)
    no_agent = [i for i in cov.no_agent if i not in st.stopped_by_fault]
    stopped = {i: t for i, t in cov.stopped.items() if i not in st.stopped_by_fault}
    if no_agent or stopped:
        out.append(_blind_finding(st, no_agent, stopped, throttled))
    elif throttled and not cov.measured:
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
    no_dashboard = cov.no_dashboard
    dashboard_absent = bool(no_dashboard) and len(no_dashboard) == len(
        [i for i in serving if i.instance_id not in blind]
    )
    out.extend(_signals_missing(st, cov, dashboard_absent))
    if dashboard_absent:
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
    return out


# The signals later rules judge by, each with what cannot be judged without it. The agent's queue, running and
# KV cache are covered above (an instance without them is not measured at all).
_JUDGED_BY = {
    pm.TTFT_P99_MS: "P99 TTFT (queueing, cold starts, the TTFT SLO)",
    pm.TPOT_P99_MS: "P99 TPOT (memory bandwidth, slow nodes, the TPOT SLO)",
    pm.GPU_UTIL_PCT: "GPU utilization (saturation: a falsely busy or an undersized fleet)",
}


def _signals_missing(st: _State, cov: AgentCoverage, dashboard_absent: bool) -> list[Finding]:
    """A signal the rules judge by that no measured instance published: the rules needing it stay silent, so
    say so rather than let silence read as health."""
    measured = cov.measured
    missing = [
        m
        for m in _JUDGED_BY
        if not any(i.metrics.get(m) for i in measured) and not (m == pm.GPU_UTIL_PCT and dashboard_absent)
    ]
    if not measured or not missing:
        return []
    ids = sorted(i.instance_id for i in measured)
    fixes_ = []
    latency = [m for m in missing if m != pm.GPU_UTIL_PCT]
    if latency:
        fixes_.append(
            "check that vLLM exports its latency histograms (vllm:time_to_first_token_seconds, "
            "vllm:time_per_output_token_seconds or, on V1, vllm:inter_token_latency_seconds) and that the "
            "node agent publishes them (`fleet agent --once --json` shows one sample)"
        )
    if pm.GPU_UTIL_PCT in missing:
        fixes_.append(
            "enable the CloudMonitor agent's GPU monitoring (acs_ecs_dashboard "
            "instance_gpu_gpu_usedutilization) or point the group's metrics_source at Prometheus with DCGM "
            "exporter"
        )
    return [
        Finding(
            "metrics_missing",
            "warning",
            [st.window.group.name],
            {"window": _span(st.window), "missing": {m: ids for m in missing}},
            f"None of the {len(ids)} measured instance(s) published "
            + " or ".join(_JUDGED_BY[m] for m in missing)
            + f", so the causes judged by {'it' if len(missing) == 1 else 'them'} cannot be seen: no finding "
            "about them is not a sign of health.",
            "; ".join(fixes_)[:1].upper() + "; ".join(fixes_)[1:] + ".",
        )
    ]


def _blind_finding(
    st: _State, no_agent: list[str], stopped: dict[str, datetime], throttled: list[str]
) -> Finding:
    """Instances without the agent's metrics: those that never published them, those that stopped."""
    w = st.window
    serving = len(st.serving)
    parts = []
    if no_agent:
        parts.append(f"{len(no_agent)} published none of the node agent's metrics")
    if stopped:
        when = ", ".join(f"{i} at {isoformat(t)}" for i, t in sorted(stopped.items())[:3])
        parts.append(f"{len(stopped)} stopped publishing them during the window ({when})")
    if throttled and not stopped:
        reason = "CloudMonitor reads were throttled"
    else:
        reason = "the node agent stopped reporting" if not no_agent else "the node agent is not reporting"
    explanation = (
        f"Of {serving} serving instance(s), {' and '.join(parts)}; {reason}, so queue, KV-cache and latency "
        "causes cannot be seen there."
    )
    fix = ""
    if no_agent:
        fix = (
            "Install and start the node agent on those instances (deploy/fleet-agent.service: "
            "`systemctl enable --now fleet-agent`; `fleet agent --once --json` shows one sample), give the "
            "instance RAM role cms:PutCustomMetric, and check that vLLM serves /metrics on the port "
            "the agent scrapes."
        )
    if stopped:
        fix += (
            (" " if fix else "")
            + "Where the agent stopped, find out why (`systemctl status fleet-agent`, `journalctl -u "
            "fleet-agent`; a vLLM or GPU failure stops its samples too) and restart it."
        )
    if throttled:
        fix += (
            " CloudMonitor throttled our reads: lower the read rate (fewer groups per tick, --since shorter)."
        )
    blind = [*no_agent, *stopped]
    return Finding(
        "metrics_missing",
        "critical" if len(blind) / max(1, serving) >= 0.5 else "warning",
        sorted(blind),
        {
            "window": _span(w),
            "missing": {m: sorted(no_agent) for m in AGENT_METRICS} if no_agent else {},
            "stopped_at": {i: isoformat(t) for i, t in stopped.items()},
            "serving_instances": serving,
            "errors": (throttled or w.errors)[:5],
        },
        explanation,
        fix,
    )


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
    """A hardware or reset-class XID (policies.metrics.HARDWARE_XIDS, RESET_XIDS): the GPU is unusable until
    reset."""
    out: list[Finding] = []
    for inst in st.serving:
        seen = [(t, int(v)) for t, v in inst.metrics.get(pm.GPU_XID, ()) if pm.xid_severity(int(v)) > 0]
        if not seen:
            continue
        st.explained.add(inst.instance_id)
        codes = sorted({c for _, c in seen})
        stopped = _agent_stopped_after(st, inst, seen[0][0])
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
                    **stopped,
                },
                f"{inst.instance_id} reported hardware XID {', '.join(map(str, codes))} (NVIDIA's catalogue: "
                "the GPU needs a reset or replacement); it serves nothing or fails the requests it gets."
                + _stopped_text(stopped),
                _xid_remedy(inst.instance_id, codes),
            )
        )
    return out


def _xid_remedy(instance_id: str, codes: list[int]) -> str:
    if any(pm.xid_severity(c) > 1 for c in codes):
        return (
            f"Replace {instance_id} (the isolation policy's xid_hardware rule: replace), or take it "
            "out of service now with fleet isolate; check the host's GPU before it returns."
        )
    return (
        f"Reboot {instance_id} (a GPU reset clears these: the isolation policy's xid_reset rule), or take "
        "it out of service now with fleet isolate; replace it if the XID returns."
    )


# ---- thermal and power throttling --------------------------------------------------------------------------
def _throttling(st: _State) -> list[Finding]:
    out: list[Finding] = []
    tpot_peers = {i.instance_id: _median(i.values(pm.TPOT_P99_MS)) for i in st.serving}
    for inst in st.serving:
        if inst.instance_id in st.explained:  # a broken GPU (XID) is slow and hot for that reason
            continue
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
            stopped = _agent_stopped_after(st, inst, thermal_t[0])
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
                        **stopped,
                    },
                    f"{inst.instance_id}'s GPU ran at or above {HOT_C:.0f} C"
                    + (" and the driver cut its SM clock" if throttling else "")
                    + ", so every request on it runs slower; the card or its cooling is at fault, not the "
                    "load." + _stopped_text(stopped),
                    thermal_fix(inst.instance_id),
                )
            )
        elif len(power_t) >= 2:
            powers = _by_time(inst, pm.GPU_POWER_W)
            st.explained.add(inst.instance_id)
            stopped = _agent_stopped_after(st, inst, power_t[0])
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
                        **stopped,
                    },
                    f"{inst.instance_id}'s GPU hit its power limit and the driver lowered its SM clock "
                    "while it was cool enough, so it serves slower than its peers." + _stopped_text(stopped),
                    f"Check {inst.instance_id}'s enforced power limit (`nvidia-smi -q -d POWER`) and restore "
                    "the default (`nvidia-smi -pl <default>`); if it cannot be raised (the host's power is "
                    "Alibaba Cloud's), isolate it per the isolation policy and replace or redeploy it to "
                    "another host, reporting the host with ECS ReportInstancesStatus.",
                )
            )
    return out


# The node agent's own GPU metrics (NVML, fleet/agent): present, they show the agent runs even when vLLM's are
# absent.
_AGENT_GPU_METRICS = (pm.GPU_XID, pm.GPU_THROTTLE_REASONS, pm.GPU_SM_CLOCK_RATIO, pm.GPU_MEM_BW_UTIL_PCT)


def _agent_stopped_after(st: _State, inst: InstanceWindow, fault_start: datetime) -> dict[str, str]:
    """``{"vllm_metrics_stopped_at": ...}`` when the instance's vLLM metrics (the agent's queue, running, KV)
    stopped after the fault began (within a period of it), or were absent all window while the agent itself
    reported GPU metrics: the fault's consequence, reported with it rather than as a missing agent."""
    iid = inst.instance_id
    if iid not in st.agent_stopped:
        return {}
    last = st.agent_stopped[iid]
    if last is None:
        if not any(inst.metrics.get(m) for m in _AGENT_GPU_METRICS):
            return {}  # no agent at all: CloudMonitor's metrics showed the fault, the agent is missing too
        st.stopped_by_fault.add(iid)
        return {"vllm_metrics_stopped_at": "before the window"}
    if fault_start > last + timedelta(seconds=max(1.0, st.window.group.publish_period_s)):
        return {}
    st.stopped_by_fault.add(iid)
    return {"vllm_metrics_stopped_at": isoformat(last)}


def _stopped_text(stopped: dict[str, str]) -> str:
    at = stopped.get("vllm_metrics_stopped_at")
    if at is None:
        return ""
    if at == "before the window":
        return (
            " Its agent reported the GPU but no vLLM metrics (queue, running, KV cache) all window: vLLM "
            "most likely went down with the GPU; the agent is not missing."
        )
    return (
        f" Its vLLM metrics (queue, running, KV cache) stopped at {at}, after the fault began: most likely a "
        "consequence (a failing GPU takes vLLM, often the node agent too, down), not a missing agent."
    )


def _names(masks: Iterable[float]) -> list[str]:
    combined = 0
    for m in masks:
        combined |= int(m)
    combined &= ~int(pm.ThrottleReason.GPU_IDLE)
    return sorted(name for name, bit in pm.THROTTLE_REASON_NAMES.items() if combined & int(bit))


# ---- memory bandwidth --------------------------------------------------------------------------------------
def _bw_threshold(st: _State, inst: InstanceWindow) -> tuple[float, fixes.BusyCeiling | None]:
    """The memory-busy share (percent) at or above which ``inst`` counts as bandwidth-bound, and the ceiling
    behind it: :data:`BW_NEAR_CEILING` of what the sizing model says a bandwidth-limited decode iteration
    reads busy on this deployment at the instance's batch and context (the all-reduces of a TP > 1 engine and
    the per-layer kernel cost leave memory idle, so such a deployment never reads 100%); the fixed
    :data:`BW_BOUND_PCT` (the same margin under a 100% ceiling) when the model, the instance type or the
    batch is unknown, or the model expects this decode to be compute- or host-bound."""
    batch = _mean(inst.values(pm.REQUESTS_RUNNING))
    if batch is None or batch < 1:
        return BW_BOUND_PCT, None
    ceiling = fixes.decode_busy_ceiling(st.window.group, batch, _tokens_per_seq(st, [inst]))
    if ceiling is None:
        return BW_BOUND_PCT, None
    return min(BW_BOUND_PCT, 100.0 * BW_NEAR_CEILING * ceiling.share), ceiling


def _past_knee(st: _State, inst: InstanceWindow) -> dict[str, Any] | None:
    """Without a TPOT SLO: whether the instance's mean batch is at or past the sizing model's latency knee
    (the batch where TPOT reaches :data:`fixes.KNEE_TPOT_FACTOR` x its batch-1 value at the measured context
    per sequence), i.e. the batch itself slows every token. A batch held steady (at ``max_num_seqs``, say)
    gives TPOT nothing to correlate with, so the model, not the correlation, has to say it."""
    batch = _mean(inst.values(pm.REQUESTS_RUNNING))
    if batch is None or batch < 1:
        return None
    g = st.window.group
    tokens = _tokens_per_seq(st, [inst])
    knee = fixes.knee_batch(g, tokens)
    n = round(batch)
    if knee is None or n < knee:
        return None
    at_batch = fixes.expected_tpot_ms(g, n, tokens)
    alone = fixes.expected_tpot_ms(g, 1, tokens)
    return {
        "knee_batch": knee,
        "batch": n,
        "tokens_per_seq": round(tokens),
        "tpot_ms_expected": _r(at_batch),
        "tpot_ms_expected_batch_1": _r(alone),
    }


def _bandwidth(st: _State) -> list[Finding]:
    w = st.window
    g = w.group
    hit: dict[str, dict[str, Any]] = {}
    ceilings: dict[str, fixes.BusyCeiling] = {}
    for inst in st.measured:
        if inst.instance_id in st.explained or inst.instance_id in st.kv_bound:
            continue
        bw = _by_time(inst, pm.GPU_MEM_BW_UTIL_PCT)
        tpot = _by_time(inst, pm.TPOT_P99_MS)
        run = _by_time(inst, pm.REQUESTS_RUNNING)
        if len(bw) < 3 or len(tpot) < 3:
            continue
        threshold, ceiling = _bw_threshold(st, inst)
        high = _frac(list(bw.values()), lambda v, th=threshold: v >= th)
        if high < SUSTAINED:
            continue
        common = sorted(set(tpot) & set(run))
        corr = _corr([run[t] for t in common], [tpot[t] for t in common])
        tpots = list(tpot.values())
        beyond = _past_knee(st, inst) if g.slo_tpot_p99_ms is None else None
        if g.slo_tpot_p99_ms is not None:
            violated = _frac(tpots, lambda v: v > g.slo_tpot_p99_ms) >= 0.3
        else:
            violated = corr >= 0.5 or beyond is not None
        if not violated:
            continue
        hit[inst.instance_id] = {
            "mem_bw_util_pct_mean": _r(_mean(bw.values())),  # the signal named by bandwidth_signal
            "threshold_pct": _r(threshold),
            "samples_over": round(high, 2),
            "tpot_p99_ms_median": _r(_median(tpots)),
            "requests_running_mean": _r(_mean(run.values())),
            "tpot_vs_batch_correlation": round(corr, 2),
        }
        if beyond is not None:
            hit[inst.instance_id]["past_knee"] = beyond
        if ceiling is not None:
            hit[inst.instance_id]["ceiling"] = ceiling.to_json()
            ceilings[inst.instance_id] = ceiling
    if not hit:
        return []
    seqs = _max_num_seqs(st)
    signal = bandwidth_signal(w)
    hit_insts = [i for i in st.measured if i.instance_id in hit]
    limit_ms = g.slo_tpot_p99_ms
    knee = fixes.batch_for_tpot(g, limit_ms, _tokens_per_seq(st, hit_insts)) if limit_ms else None
    batch_now = _mean(_mean(i.values(pm.REQUESTS_RUNNING)) or 0.0 for i in hit_insts) or 0.0
    past = [v["past_knee"] for v in hit.values() if "past_knee" in v]
    parts = []
    if knee and (seqs is None or knee < seqs) and knee < batch_now:
        parts.append(
            f"lower max_num_seqs{f' from {seqs}' if seqs else ''} to {knee} to keep P99 TPOT within "
            f"{limit_ms:g} ms (the sizing model's decode time at the measured context per sequence; the "
            f"batch averaged {batch_now:.0f})"
        )
    elif past:
        k = min(p["knee_batch"] for p in past)
        parts.append(
            f"lower max_num_seqs{f' from {seqs}' if seqs else ''} to {k} (the latency knee: TPOT at "
            f"{fixes.KNEE_TPOT_FACTOR:g}x its batch-1 value, per the sizing model at the measured context "
            "per sequence), or set a TPOT SLO (tpot_p99_ms) to size it against"
        )
    elif limit_ms is None:
        parts.append("lower max_num_seqs until TPOT stops rising with the batch")
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
                "threshold": "sizing_ceiling" if ceilings else "fixed",
                "near_ceiling_share": BW_NEAR_CEILING,
                "threshold_pct": BW_BOUND_PCT if not ceilings else None,
                "slo_tpot_p99_ms": g.slo_tpot_p99_ms,
                "max_num_seqs": seqs,
                "instances": hit,
            },
            f"{SIGNAL_TEXT[signal]} {_bw_level_text(g, hit, ceilings)}, and "
            + _tpot_text(g, past)
            + ": decoding looks limited by reading weights and KV cache, so more compute would not "
            "speed it up" + ("" if signal == BandwidthSignal.DCGM_DRAM_ACTIVE else BUSY_CAVEAT) + ".",
            "; ".join(parts) + ".",
        )
    ]


def _tpot_text(g: Any, past: list[dict[str, Any]]) -> str:
    """Why TPOT counts as too high: over its SLO, else past the sizing model's knee, else rising with the
    batch."""
    if g.slo_tpot_p99_ms is not None:
        return f"P99 TPOT was over its {g.slo_tpot_p99_ms:g} ms SLO"
    if not past:
        return "TPOT rose with the batch"
    p = max(past, key=lambda v: v["batch"] / v["knee_batch"])
    return (
        f"the batch averaged {p['batch']}, at or past the sizing model's latency knee of {p['knee_batch']} "
        f"sequences at {p['tokens_per_seq']} tokens each (it expects {p['tpot_ms_expected']:g} ms per token "
        f"at that batch against {p['tpot_ms_expected_batch_1']:g} ms alone; the group has no TPOT SLO)"
    )


_LINK_NAME = {"pcie": "PCIe", "nvlink": "NVLink"}


def _bw_level_text(g: Any, hit: dict[str, dict[str, Any]], ceilings: dict[str, fixes.BusyCeiling]) -> str:
    """How high the memory-busy share was, and against which ceiling it was judged (and why that one)."""
    means = sorted({round(v["mem_bw_util_pct_mean"]) for v in hit.values() if v["mem_bw_util_pct_mean"]})
    level = "averaged " + (f"{means[0]}%" if len(means) == 1 else f"{means[0]}-{means[-1]}%") if means else ""
    if not ceilings:
        why = (
            "the sizing model does not know this model or instance type"
            if fixes.deployment(g) is None
            else "the sizing model expects this decode to be compute- or host-bound, so it gives no ceiling"
        )
        return f"{level} and was at or above {BW_BOUND_PCT:.0f}% in most samples (a fixed threshold: {why})"
    shares = sorted({round(100.0 * c.share) for c in ceilings.values()})
    ceil = f"{shares[0]}%" if len(shares) == 1 else f"{shares[0]}-{shares[-1]}%"
    c = ceilings[sorted(ceilings)[0]]
    if c.tp > 1:
        link = _LINK_NAME.get(c.interconnect, c.interconnect)
        idle = (
            f"{c.comm_ms:.1f} ms in the TP {c.tp} all-reduces over {link} and {c.other_ms:.1f} ms of "
            "per-layer kernel cost"
        )
    else:
        idle = f"{c.other_ms:.1f} ms of per-layer kernel cost"
    return (
        f"{level} and was in most samples at or above {100 * BW_NEAR_CEILING:.0f}% of the {ceil} a "
        "bandwidth-limited decode can read on this deployment (the sizing model's decode step at the "
        f"measured batch of {c.batch} and {c.tokens_per_seq:.0f} tokens per sequence spends "
        f"{c.read_ms:.1f} ms streaming weights and KV and {idle}, which leave memory idle, so even a fully "
        "bandwidth-bound engine does not read near 100% here)"
    )


# ---- node outlier ------------------------------------------------------------------------------------------
_OUTLIER_METRICS = ((pm.TPOT_P99_MS, 10.0), (pm.E2E_P99_MS, 500.0), (pm.TTFT_P99_MS, 500.0))


def _outliers(st: _State) -> list[Finding]:
    out: list[Finding] = []
    pool = st.measured
    if len(pool) < OUTLIER_MIN_PEERS + 1:
        return out
    out.extend(_clock_outliers(st, pool))
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
            if any(iid in f.scope for f in out):  # slow by its clock: reported once
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
                        **_outlier_evidence(st, metric, mine, base, sustained),
                        "load": _r(load),
                        "peers_load": _r(peer_load),
                    },
                    f"{iid}'s {metric} was {mine / base if base > 0 else math.inf:.1f}x its peers' median "
                    f"through the window: {why}.",
                    fix,
                )
            )
    return out


def _outlier_evidence(st: _State, metric: str, mine: float, base: float, sustained: float) -> dict[str, Any]:
    """The evidence every node_outlier finding carries, whichever check found it: the node's median of
    ``metric`` against its peers', and the share of its samples over the check's factor."""
    return {
        "window": _span(st.window),
        "metric": metric,
        "value_median": _r(mine),
        "peers_median": _r(base),
        "factor": round(mine / base, 2) if base > 0 else None,
        "samples_over": round(sustained, 2),
    }


def _clock_outliers(st: _State, pool: list[InstanceWindow]) -> list[Finding]:
    """A node whose SM clock runs well below its peers' (no thermal or power reason published: the throttling
    rule has not explained it) with P99 TPOT :data:`CLOCK_OUTLIER_FACTOR` x its peers' in at least half its
    samples: a lowered power limit the driver does not flag, clocks locked low, a misconfigured card."""
    out: list[Finding] = []
    clock = {
        i.instance_id: _median(_after(i.metrics.get(pm.GPU_SM_CLOCK_RATIO, ()), st.steady_from)) for i in pool
    }
    tpot = {i.instance_id: _median(_after(i.metrics.get(pm.TPOT_P99_MS, ()), st.steady_from)) for i in pool}
    for inst in pool:
        iid = inst.instance_id
        mine, my_clock = tpot.get(iid), clock.get(iid)
        peers = [v for k, v in tpot.items() if k != iid and v is not None]
        peer_clocks = [v for k, v in clock.items() if k != iid and v is not None]
        if iid in st.explained or mine is None or my_clock is None or len(peers) < OUTLIER_MIN_PEERS:
            continue
        if len(peer_clocks) < OUTLIER_MIN_PEERS:
            continue
        base, peer_clock = statistics.median(peers), statistics.median(peer_clocks)
        if my_clock >= THROTTLED_CLOCK_RATIO or my_clock > CLOCK_BELOW_PEERS * peer_clock:
            continue
        if mine <= CLOCK_OUTLIER_FACTOR * base or mine - base < _OUTLIER_METRICS[0][1]:
            continue
        vals = _after(inst.metrics.get(pm.TPOT_P99_MS, ()), st.steady_from)
        sustained = _frac(vals, lambda v, b=base: v > CLOCK_OUTLIER_FACTOR * b)
        if sustained < SUSTAINED:
            continue
        temps = inst.values(pm.GPU_TEMPERATURE_C)
        reasons = _names(inst.values(pm.GPU_THROTTLE_REASONS))
        out.append(
            Finding(
                "node_outlier",
                "warning",
                [iid],
                {
                    **_outlier_evidence(st, pm.TPOT_P99_MS, mine, base, sustained),
                    "sm_clock_ratio_median": _r(my_clock, 2),
                    "peers_sm_clock_ratio_median": _r(peer_clock, 2),
                    "throttle_reasons": reasons,
                    "temperature_max_c": _r(max(temps) if temps else None),
                },
                _clock_text(iid, my_clock, peer_clock, reasons, mine / base if base > 0 else math.inf),
                _clock_fix(iid),
            )
        )
    return out


def _clock_text(iid: str, clock: float, peer_clock: float, reasons: list[str], factor: float) -> str:
    why = f" (reasons: {', '.join(reasons)})" if reasons else ", with no thermal or power reason published"
    return (
        f"{iid}'s SM clock ran at {100 * clock:.0f}% of its maximum against its peers' "
        f"{100 * peer_clock:.0f}%{why}, and its {pm.TPOT_P99_MS} was {factor:.1f}x its peers' median: "
        "the lower clock slows every token it generates."
    )


def _clock_fix(iid: str) -> str:
    return (
        f"Check {iid}'s clocks and power limit against their maximum (`nvidia-smi -q -d "
        "CLOCK,POWER,PERFORMANCE`): reset clocks locked or set low (`nvidia-smi -rgc`, "
        "`nvidia-smi -rac`) and restore the default power limit (`nvidia-smi -pl <default>`); if the "
        f"clock stays low, isolate it (fleet isolate {iid}) and replace or redeploy it to another host, "
        "reporting the host with ECS ReportInstancesStatus."
    )
