"""The memory and speed breakdown of one deployment, term by term, each with where its figure comes from.

Pure: ``fleet size --explain`` renders it; ``to_json`` gives the same for ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sizing.memory import Deployment, MemoryPlan, MemoryTerm
from sizing.perf import BW_EFF, LAYER_OVERHEAD_S, MFU, STEP_OVERHEAD_S, PerfModel


@dataclass(frozen=True)
class SpeedTerm:
    """One part of a batch-1 decode step, milliseconds, with its source."""

    name: str
    ms: float
    source: str
    calibrated: bool = False


@dataclass(frozen=True)
class Explanation:
    memory: tuple[MemoryTerm, ...]
    speed: tuple[SpeedTerm, ...]
    decode_step_ms: float
    bound: str  # "bandwidth" or "compute"
    calibration: str | None  # "gpu", "deployment" or None

    def to_json(self) -> dict[str, object]:
        return {
            "memory": [
                {"term": t.name, "gib": round(t.gib, 3), "source": t.source, "calibrated": t.calibrated}
                for t in self.memory
            ],
            "speed": [
                {"term": s.name, "ms": round(s.ms, 3), "source": s.source, "calibrated": s.calibrated}
                for s in self.speed
            ],
            "decode_step_ms": round(self.decode_step_ms, 3),
            "bound": self.bound,
            "calibration": self.calibration,
        }


def explain(dep: Deployment, plan: MemoryPlan, perf: PerfModel, context_tokens: int = 0) -> Explanation:
    """The breakdown of ``dep`` (as planned) with one sequence decoding at ``context_tokens``."""
    gpu_cal = dep.calibration is not None and dep.calibration.applies_to_gpu(dep.gpu)
    dep_cal = (
        gpu_cal
        and dep.calibration is not None
        and dep.calibration.applies_to(dep.model, dep.gpu, dep.tp, plan.dtype)
    )
    bw_src = f"achievable bandwidth {dep.gpu.bandwidth_gbps:g} GB/s x {perf.bw_eff:.2f}" + (
        " (calibrated)"
        if gpu_cal and perf.bw_eff != BW_EFF
        else " (BW_EFF fitted on tt-inference-server#143 + InferenceBench H100)"
    )
    weights_ms = perf.weights_read_s(1) * 1000
    kv_ms = perf.kv_read_bytes(1, context_tokens) / perf.bandwidth_bps * 1000
    flops = perf.linear_flops_per_token + perf.lm_head_flops_per_token + perf.attn_flops(1, context_tokens)
    compute_ms = flops / perf.compute_flops * 1000
    bound = "bandwidth" if weights_ms + kv_ms >= compute_ms else "compute"
    layers = dep.model.layers
    ic = dep.gpu.interconnect
    speed = [
        SpeedTerm("weights read", weights_ms, bw_src),
        SpeedTerm(f"KV read ({context_tokens} tokens)", kv_ms, bw_src),
        SpeedTerm(
            "compute (overlaps the reads; the larger counts)",
            compute_ms,
            f"{perf.compute_flops / MFU / 1e12:g} TFLOPS x MFU {MFU} (fitted on tt-inference-server#143)",
        ),
        SpeedTerm(
            "fixed per-step cost (a floor: the step takes at least this)",
            STEP_OVERHEAD_S * 1000,
            "estimate: scheduler, sampler, input prep; overlapped by the GPU work above it",
        ),
        SpeedTerm(
            f"per-layer cost ({layers} layers)",
            LAYER_OVERHEAD_S * layers * 1000,
            "estimate: 15 us/layer of kernel launch and tails under CUDA graphs",
        ),
        SpeedTerm(
            f"TP all-reduce latency ({2 * layers if dep.tp > 1 else 0} x {ic.latency_us:g} us, {ic.kind})",
            perf.comm_latency_s * 1000,
            "gpus.yaml interconnect (estimate)",
        ),
        SpeedTerm(
            "TP all-reduce bytes / link bandwidth",
            perf.comm_s_per_token * 1000,
            f"ring 2(TP-1)/TP x hidden x 2 B over {ic.bus_gbps:g} GB/s ({ic.kind})",
        ),
    ]
    step_ms = perf.decode_tpot_s(context_tokens) * 1000
    if perf.decode_time_scale != 1.0:
        speed.append(SpeedTerm("calibrated scale", perf.decode_time_scale, "x measured / modelled", True))
    return Explanation(
        memory=plan.terms,
        speed=tuple(speed),
        decode_step_ms=step_ms,
        bound=bound,
        calibration="deployment" if dep_cal else ("gpu" if gpu_cal else None),
    )
