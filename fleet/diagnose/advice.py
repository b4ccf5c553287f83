"""Fix texts that need more than one number: what to do with ``max_num_seqs`` when requests queue, what an
ECS user can do about a hot GPU, and which signal a "memory bandwidth" reading really is. Pure: no I/O.

Split from :mod:`fleet.diagnose.rules` (which calls these) so that the rules module stays one rule per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from fleet.diagnose import fixes
from fleet.diagnose.model import GroupContext, InstanceWindow, Window
from policies import metrics as pm

KV_FULL_PCT = 90.0  # as fleet.diagnose.rules: "near full"; a raised batch must leave the KV cache below it
# The batch "sits at" max_num_seqs when it averages this share of it while requests wait.
BATCH_PINNED_SHARE = 0.9


# ---- max_num_seqs ------------------------------------------------------------------------------------------
def _mean(values: Iterable[float]) -> float | None:
    vs = list(values)
    return sum(vs) / len(vs) if vs else None


def _since(inst: InstanceWindow, metric: str, since: datetime | None) -> list[tuple[datetime, float]]:
    return [(t, v) for t, v in inst.metrics.get(metric, ()) if since is None or t >= since]


def batch_at_cap(
    g: GroupContext, backlog: Sequence[InstanceWindow], since: datetime | None, seqs: int
) -> tuple[float, float | None] | None:
    """(mean batch while requests waited, mean KV cache use) when the batch sat at ``max_num_seqs`` while
    requests waited and the KV cache had room: the cap, not the GPU or its memory, limits throughput. ``None``
    otherwise. KV cache readings that cannot be true with the batch running
    (:func:`fixes.kv_reading_plausible`: 0% while requests run) are left out; with none left the KV use is
    ``None``: not known, not room."""
    d = fixes.deployment(g)
    running: list[float] = []
    kv: list[float] = []
    for inst in backlog:
        waiting = dict(inst.metrics.get(pm.QUEUE_WAITING, ()))
        running_at = dict(inst.metrics.get(pm.REQUESTS_RUNNING, ()))
        running.extend(n for t, n in _since(inst, pm.REQUESTS_RUNNING, since) if waiting.get(t, 0.0) >= 1)
        kv.extend(
            v
            for t, v in _since(inst, pm.KV_CACHE_USAGE_PCT, since)
            if fixes.kv_reading_plausible(d, v, running_at.get(t, 0.0))
        )
    batch, kv_used = _mean(running), _mean(kv)
    if batch is None or batch < BATCH_PINNED_SHARE * seqs or (kv_used is not None and kv_used >= KV_FULL_PCT):
        return None
    return batch, kv_used


def raise_limits(g: GroupContext, knee: int, tokens_per_seq: float) -> dict[str, int]:
    """What bounds a raised max_num_seqs: the latency knee, the KV cache at 90% full, the TPOT SLO."""
    limits: dict[str, int] = {"latency_knee": knee}
    kv_limit = fixes.kv_batch_limit(g, tokens_per_seq, KV_FULL_PCT / 100.0)
    if kv_limit is not None:
        limits["kv_cache_90pct"] = kv_limit
    tpot_limit = fixes.batch_for_tpot(g, g.slo_tpot_p99_ms, tokens_per_seq) if g.slo_tpot_p99_ms else None
    if tpot_limit is not None:
        limits["tpot_slo"] = tpot_limit
    return limits


def cap_limits_throughput(
    g: GroupContext,
    backlog: Sequence[InstanceWindow],
    since: datetime | None,
    seqs: int | None,
    knee: int | None,
    tokens_per_seq: float,
) -> bool:
    """Whether raising max_num_seqs would let the instances serve more: the batch sat at the cap with KV room,
    and the sizing model (when it knows the deployment) allows a larger one."""
    if not seqs or batch_at_cap(g, backlog, since, seqs) is None:
        return False
    return knee is None or min(raise_limits(g, knee, tokens_per_seq).values()) > seqs


def batch_advice(
    g: GroupContext,
    backlog: Sequence[InstanceWindow],
    since: datetime | None,
    seqs: int,
    knee: int | None,
    tokens_per_seq: float,
    evidence: dict[str, Any],
) -> str | None:
    """What to do with max_num_seqs on instances with a queue: raise it when the batch sits at the cap while
    requests wait and the KV cache has room (the cap, not the GPU, limits throughput), to the smallest of the
    latency knee, what the KV cache holds at 90% full and what the TPOT SLO allows (the sizing model at the
    measured context per sequence; without the model, raise it and say what would size it); lower it when it
    is past the knee; else nothing (it is not the limit)."""
    at_cap = batch_at_cap(g, backlog, since, seqs)
    if at_cap is not None and knee is None:
        batch, kv_used = at_cap
        evidence.update(
            batch_while_waiting_mean=round(batch, 1),
            kv_cache_usage_pct_mean=None if kv_used is None else round(kv_used, 1),
        )
        return (
            _raise_text(seqs, None, batch, kv_used)
            + " (the group names no model and instance type of the sizing catalog, so there is no "
            f"computed target: raise it step by step while the KV cache stays below {KV_FULL_PCT:.0f}% and "
            "TPOT within its SLO, or give --model and --instance-type)"
        )
    if at_cap is not None and knee is not None and knee > seqs:
        batch, kv_used = at_cap
        limits = raise_limits(g, knee, tokens_per_seq)
        kv_limit, tpot_limit = limits.get("kv_cache_90pct"), limits.get("tpot_slo")
        target = min(limits.values())
        evidence.update(
            batch_while_waiting_mean=round(batch, 1),
            kv_cache_usage_pct_mean=None if kv_used is None else round(kv_used, 1),
            max_num_seqs_limits=limits,
            max_num_seqs_recommended=target if target > seqs else None,
        )
        if target <= seqs:
            return None
        return (
            _raise_text(seqs, target, batch, kv_used)
            + f" (the sizing model at {tokens_per_seq:.0f} tokens per sequence: latency "
            f"knee {knee}, where TPOT reaches {fixes.KNEE_TPOT_FACTOR:g}x its batch-1 value"
            + (f"; the KV cache holds {kv_limit} at 90% full" if kv_limit is not None else "")
            + (f"; the TPOT SLO allows {tpot_limit}" if tpot_limit is not None else "")
            + ")"
        )
    if knee is not None and knee < seqs:
        return (
            f"lower max_num_seqs from {seqs} to {knee} (the latency knee: TPOT at "
            f"{fixes.KNEE_TPOT_FACTOR:g}x its batch-1 value, per the sizing model)"
        )
    return None


def _raise_text(seqs: int, target: int | None, batch: float, kv_used: float | None) -> str:
    """Why to raise max_num_seqs: the batch at the cap while requests waited, and the KV cache's room when a
    plausible reading shows it; without one the advice is conditional on the room, not asserted."""
    to = f" to {target}" if target is not None else ""
    at_cap = f"the batch sat at the cap ({batch:.0f} running) while requests waited"
    if kv_used is not None:
        return (
            f"raise max_num_seqs from {seqs}{to}: {at_cap} and the KV cache was only {kv_used:.0f}% used, "
            "so the cap, not the GPU, limits throughput"
        )
    return (
        f"raise max_num_seqs from {seqs}{to} if the KV cache has room: {at_cap}, but whether the KV cache "
        "had room could not be judged (no plausible KV cache usage reading: none published, or under one "
        "block per running request, such as 0% while requests ran); check vLLM's KV cache usage on the "
        "instances first"
    )


# ---- thermal -----------------------------------------------------------------------------------------------
def thermal_fix(iid: str) -> str:
    """What an ECS user can do about a hot GPU: the host and its cooling belong to Alibaba Cloud, so the fix
    is to move off that host (replace or redeploy) and report it, never to rearrange racks."""
    return (
        f"Take {iid} off that host: isolate it per the isolation policy (gpu_overheat: reboot, replace if it "
        f"recurs), or now with `fleet isolate {iid}`, then replace it (RemoveInstances: ESS launches a new "
        "instance, normally on another host) or redeploy it to a new host (ECS RedeployInstance, where the "
        f"instance type allows it); report the host to Alibaba Cloud (ECS ReportInstancesStatus for {iid}, "
        "or a ticket with the temperatures and clocks) and check its system events "
        "(DescribeInstanceHistoryEvents) for a scheduled SystemMaintenance.Redeploy."
    )


# ---- memory bandwidth signal -------------------------------------------------------------------------------
class BandwidthSignal(StrEnum):
    """What ``gpu_mem_bw_util_pct`` measured in a window, by where it was read (fleet/service/sources)."""

    # The node agent's NVML utilization.memory (CloudMonitor custom metric gpu_mem_bw_util): the share of time
    # in the sample period during which device memory was read or written, not the share of peak bandwidth.
    NVML_MEMORY_BUSY = "nvml_memory_busy_pct"
    # Prometheus with DCGM: DCGM_FI_PROF_DRAM_ACTIVE x 100 (the share of cycles the DRAM interface is active
    # moving data, which tracks bandwidth use), or DCGM_FI_DEV_MEM_COPY_UTIL where profiling is off.
    DCGM_DRAM_ACTIVE = "dcgm_dram_active_pct"


SIGNAL_TEXT = {
    BandwidthSignal.NVML_MEMORY_BUSY: "GPU memory busy time (NVML utilization.memory)",
    BandwidthSignal.DCGM_DRAM_ACTIVE: "DRAM activity (DCGM DRAM_ACTIVE)",
}
BUSY_CAVEAT = (
    " (memory busy time counts any read or write in a sampling period, so it overstates bandwidth use; "
    "DCGM's DRAM_ACTIVE, read through a Prometheus metrics source, measures it)"
)


def bandwidth_signal(w: Window) -> BandwidthSignal:
    return BandwidthSignal.DCGM_DRAM_ACTIVE if w.source == "prometheus" else BandwidthSignal.NVML_MEMORY_BUSY
