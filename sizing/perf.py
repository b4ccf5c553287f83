"""How long one vLLM scheduler iteration takes: decode bandwidth roofline, prefill compute roofline, TP comms.

One iteration runs a batch of ``num_tokens`` new tokens (one per decoding sequence plus prefill chunks)
through the model on every rank:

    gpu = max((weights/rank + KV bytes read) / (BW x bw_eff), (linear + attention FLOPs/rank) / (peak x MFU))
          + LAYER_OVERHEAD_S x layers                                            (per-layer kernel cost)
          + 2 x layers x (latency + 2 (TP-1)/TP x num_tokens x hidden x 2 bytes / bus)   (TP all-reduces)
    t = max(STEP_OVERHEAD_S, gpu)      (the host's per-step work overlaps the GPU's: a floor, not an addend)

Decode is the bandwidth term (all weights are read for a handful of tokens); prefill is the compute term.
The all-reduce latency and bus bandwidth are the instance's (NVLink or PCIe, ``gpus.yaml`` interconnect).

Calibration, on two batch-1 vLLM decode measurements on H100 SXM: tt-inference-server#143
(Qwen2.5-72B-Instruct bf16, TP2, 30.9 ms per token) and yobitelcomm InferenceBench (Llama-3.1-8B-Instruct
fp16, vLLM 0.21.0, 6.48 ms TPOT p50 at concurrency 1):
* BW_EFF = 0.78, fitted on those two rows (least squares: 0.776; -2.9% and +2.5% left). Both are GPU-bound,
  so the host's per-step work (STEP_OVERHEAD_S) does not show in them: the 8B row has only 0.5 ms above its
  4.8 ms weight read at full bandwidth, less than the 1 ms step cost that was added on top before (with it,
  no bandwidth share fits both rows). aiconfigurator uses 0.8 (vllm-sizing.md section 6). A GPU's own
  achievable share, where a calibration measured it, replaces it (``fleet size calibrate``). Checked on an
  A100-40GB Llama-3.1-8B run (vLLM 0.23, about 75 tokens/s at concurrency 1: +4%) and an RTX 4080
  Qwen2.5-7B-AWQ run (vLLM 0.26, 9.40 ms: +14%).
* STEP_OVERHEAD_S = 1 ms per iteration (scheduler, sampler, input preparation): an estimate, now a floor the
  GPU time overlaps (CUDA graphs and vLLM's asynchronous scheduling run the host ahead of the GPU). It is
  what keeps 0.5B-1.5B models from being predicted far too fast: their weights read in well under it.
* MFU = 0.62 from tt-inference-server#143's TTFT of 1063.8 ms for an 8192-token prompt (one step at the H100
  8192-token budget). The reference gives 0.4-0.7 for prefill. Its 1024-token TTFT (129 ms) is then
  predicted at 126 ms.
* LAYER_OVERHEAD_S = 15 us per layer (about ten kernels per layer at 1-2 us launch and tail each, even under
  CUDA graphs): an estimate, kept; it is GPU time, added to the reads.
* MLA_LAYER_OVERHEAD_S = 0.48 ms per layer for MLA models (DeepSeek V2/V3/R1: latent attention and a
  fine-grained MoE with block-FP8 weights in every layer). Three public single-request decode rates agree on
  about 30 tokens/s whatever the GPUs: DeepSeek-V3.2 on 8 x H20 with vLLM 0.13, 30 tokens/s (vllm#30832);
  DeepSeek-R1-0528 on 16 x H100, TPOT 31.2 ms (tenstorrent/tt-inference-server#356); R1 on 2 x 8 x H100 with
  vLLM, 30 tokens/s (sgl-project/sglang#3656). The reads alone give 3.3 ms on 8 x H20: a per-step cost of
  launches and synchronisation, not bandwidth, so it is added per layer ((33 - 3.3) ms / 61 layers).
docs/sizing-accuracy.md compares the result with further public measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sizing.calibration import Calibration
from sizing.catalog import GPU, ModelShape
from sizing.memory import (
    WEIGHT_BYTES,
    Deployment,
    MemoryPlan,
    indexer_token_bytes,
    kv_bytes_per_token,
    weight_bytes_per_rank,
)

BW_EFF = 0.78
MFU = 0.62
STEP_OVERHEAD_S = 0.001
LAYER_OVERHEAD_S = 15e-6
MLA_LAYER_OVERHEAD_S = 0.48e-3


def compute_tflops(gpu: GPU, dtype: str) -> float:
    """Dense tensor throughput the GEMMs of ``dtype`` run at (4-bit and weight-only fp8 compute in 16 bit)."""
    if dtype == "int8":
        return gpu.int8_tops
    if dtype == "fp8" and gpu.native_fp8 and gpu.fp8_tflops:
        return gpu.fp8_tflops
    return gpu.fp16_tflops


@dataclass(frozen=True)
class PerfModel:
    """Per-iteration cost coefficients of one deployment (per rank; every rank runs in lock step)."""

    weight_bytes: float  # per rank, dense part (read every iteration)
    expert_bytes: float  # per rank, all routed experts (a MoE reads only the experts its tokens hit)
    experts: int
    experts_per_token: int
    linear_flops_per_token: float  # per rank
    lm_head_flops_per_token: float  # per rank, per sampled token
    kv_bytes_per_token: float  # per rank, read per context token
    attn_flops_per_pair: float  # per rank, per (query token x context token) pair
    bandwidth_bps: float  # effective bytes/s
    compute_flops: float  # effective FLOP/s
    comm_latency_s: float  # per iteration, all all-reduces' fixed cost
    comm_s_per_token: float  # per iteration, per batched token
    overhead_s: float = 0.0  # per-layer GPU cost, added to the reads
    floor_s: float = STEP_OVERHEAD_S  # the host's per-step work: the step takes at least this long
    bw_eff: float = BW_EFF  # the achievable bandwidth share behind ``bandwidth_bps`` (for calibration)
    decode_time_scale: float = 1.0  # calibrated: measured / modelled decode step
    prefill_time_scale: float = 1.0  # calibrated: measured / modelled prefill
    # DeepSeek V3.2's sparse attention: each query token attends to at most ``sparse_topk`` context tokens,
    # reading their latents (``sparse_kv_bytes_per_token``) and attending to them (``sparse_flops_per_pair``),
    # while the lightning indexer scans every context token (``kv_bytes_per_token``,
    # ``attn_flops_per_pair``). 0: dense attention
    sparse_topk: int = 0
    sparse_kv_bytes_per_token: float = 0.0
    sparse_flops_per_pair: float = 0.0

    def kv_read_bytes(self, num_tokens: int, context_tokens: float) -> float:
        """Bytes of cache an iteration of ``num_tokens`` new tokens reads over ``context_tokens`` of context:
        all of it, or with sparse attention the indexer's keys of all of it and at most top-k latents a
        query token (exact for decode, one query a sequence; a bound where contexts straddle top-k)."""
        read = context_tokens * self.kv_bytes_per_token
        if self.sparse_topk:
            read += min(context_tokens, num_tokens * self.sparse_topk) * self.sparse_kv_bytes_per_token
        return read

    def attn_flops(self, num_tokens: int, attn_pairs: float) -> float:
        """Attention FLOPs of ``attn_pairs`` (query x context token) pairs among ``num_tokens`` queries: with
        sparse attention, the indexer's over every pair and the attention's over at most top-k a query."""
        flops = attn_pairs * self.attn_flops_per_pair
        if self.sparse_topk:
            flops += min(attn_pairs, num_tokens * self.sparse_topk) * self.sparse_flops_per_pair
        return flops

    def sparse_knee(self, n: int) -> float:
        """The total context past which ``n`` decoding sequences' attention stops growing but for the
        indexer's scan (``n`` x top-k); infinite for dense attention."""
        return float(n * self.sparse_topk) if self.sparse_topk else math.inf

    def weights_read_s(self, num_tokens: int) -> float:
        if not self.experts:
            return self.weight_bytes / self.bandwidth_bps
        # expected share of experts touched by num_tokens tokens routed top-k out of E
        miss = (1.0 - self.experts_per_token / self.experts) ** max(num_tokens, 1)
        return (self.weight_bytes + self.expert_bytes * (1.0 - miss)) / self.bandwidth_bps

    def step_s(self, num_tokens: int, context_tokens: float, attn_pairs: float, sampled: int) -> float:
        """One iteration: ``num_tokens`` new tokens, ``context_tokens`` KV read, ``attn_pairs`` QK pairs."""
        return self.step_parts(num_tokens, context_tokens, attn_pairs, sampled)[0]

    def step_parts(
        self, num_tokens: int, context_tokens: float, attn_pairs: float, sampled: int
    ) -> tuple[float, float]:
        """``step_s`` and the part of it spent streaming memory (its reads, at the same time scale)."""
        if num_tokens <= 0:
            return 0.0, 0.0
        flops = (
            self.linear_flops_per_token * num_tokens
            + self.lm_head_flops_per_token * sampled
            + self.attn_flops(num_tokens, attn_pairs)
        )
        read = self.read_s(num_tokens, context_tokens)
        gpu = (
            self.overhead_s
            + max(read, flops / self.compute_flops)
            + self.comm_latency_s
            + self.comm_s_per_token * num_tokens
        )
        scale = self.prefill_time_scale if num_tokens > sampled else self.decode_time_scale
        return max(self.floor_s, gpu) * scale, read * scale

    def read_s(self, num_tokens: int, context_tokens: float) -> float:
        """The iteration's memory reads at the effective bandwidth: the weights its tokens touch and the KV of
        ``context_tokens``."""
        kv = self.kv_read_bytes(num_tokens, context_tokens)
        return self.weights_read_s(num_tokens) + kv / self.bandwidth_bps

    def decode_step_s(self, n: int, context_tokens: float) -> float:
        """A decode-only iteration of ``n`` sequences holding ``context_tokens`` in all."""
        return self.step_s(n, context_tokens, context_tokens, n)

    def decode_read_s(self, n: int, context_tokens: float) -> float:
        """The memory-read part of that iteration (zero when compute bounds it)."""
        read = self.read_s(n, context_tokens)
        flops = (
            self.linear_flops_per_token * n
            + self.lm_head_flops_per_token * n
            + self.attn_flops(n, context_tokens)
        )
        return read * self.decode_time_scale if read >= flops / self.compute_flops else 0.0

    def decode_affine(self, n: int, context_tokens: float = 0.0) -> tuple[float, float]:
        """A decode-only iteration of ``n`` sequences costs about ``a + b x total_context``: returns (a, b).

        Exact while the step is bandwidth-bound (decode almost always is): the context adds KV reads. Where
        the host's floor bounds the step (tiny models, few sequences) ``a`` is the floor and the slope a
        little high. With sparse attention the cost bends at ``sparse_knee(n)``: (a, b) is the piece that
        holds ``context_tokens``, past the knee only the indexer's scan growing with the context."""
        knee = self.sparse_knee(n)
        above = context_tokens >= knee
        start = knee if above else 0.0
        latent, attend = (0.0, 0.0) if above else (self.sparse_kv_bytes_per_token, self.sparse_flops_per_pair)
        if self.decode_read_s(n, start) > 0:
            b = (self.kv_bytes_per_token + latent) / self.bandwidth_bps
        else:
            b = (self.attn_flops_per_pair + attend) / self.compute_flops
        b *= self.decode_time_scale
        return self.step_s(n, start, start, n) - b * start, b

    def decode_tpot_s(self, context_tokens: int = 0) -> float:
        """Batch-1 time per output token at a given context length."""
        return self.decode_step_s(1, float(context_tokens))

    def prefill_s(self, prompt_tokens: int, chunk_tokens: int) -> float:
        """Time to prefill one prompt alone, in chunks of ``chunk_tokens``."""
        done, total = 0, 0.0
        while done < prompt_tokens:
            c = min(chunk_tokens, prompt_tokens - done)
            total += self.step_s(c, done, c * (done + (c + 1) / 2), 1)
            done += c
        return total


def perf_model(
    model: ModelShape,
    gpu: GPU,
    tp: int,
    dtype: str,
    kv_cache_dtype: str = "auto",
    bw_eff: float | None = None,
    mfu: float = MFU,
    *,
    calibration: Calibration | None = None,
) -> PerfModel:
    """The iteration-cost coefficients of ``model`` on ``tp`` x ``gpu`` with weights in ``dtype``.

    ``bw_eff`` defaults to the calibration's achievable share for this GPU kind, else ``BW_EFF``; the
    calibration's time scales apply only to its own deployment (same model, GPU, TP and dtype)."""
    gpu_cal = calibration if calibration is not None and calibration.applies_to_gpu(gpu) else None
    if bw_eff is None:
        bw_eff = gpu_cal.bw_eff if gpu_cal is not None and gpu_cal.bw_eff else BW_EFF
    dep_cal = gpu_cal if gpu_cal is not None and gpu_cal.applies_to(model, gpu, tp, dtype) else None
    total = weight_bytes_per_rank(model, dtype, tp)
    expert_bytes = model.expert_params * WEIGHT_BYTES[dtype] / tp
    lm_head = 2.0 * model.hidden * model.vocab / tp
    kv = float(kv_bytes_per_token(model, tp, kv_cache_dtype, dtype))
    attn = model.attention_flops_per_pair / tp
    sparse: dict[str, float] = {}
    if model.index_topk:  # the indexer scans every token's key; the attention reads the top-k latents
        index = float(model.layers * indexer_token_bytes(model))
        sparse = {"sparse_kv_bytes_per_token": kv - index, "sparse_flops_per_pair": attn}
        kv, attn = index, model.indexer_flops_per_pair
    ic = gpu.interconnect
    comm_latency = comm_per_token = 0.0
    if tp > 1:
        allreduces = 2 * model.layers  # after attention and after the MLP, every layer
        comm_latency = allreduces * ic.latency_us * 1e-6
        ring = 2.0 * (tp - 1) / tp  # ring all-reduce moves this share of the buffer over each link
        comm_per_token = allreduces * ring * model.hidden * 2.0 / (ic.bus_gbps * 1e9)
    return PerfModel(
        weight_bytes=total - expert_bytes,
        expert_bytes=expert_bytes,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
        linear_flops_per_token=2.0 * model.active_linear_params / tp,
        lm_head_flops_per_token=lm_head,
        kv_bytes_per_token=kv,
        attn_flops_per_pair=attn,
        bandwidth_bps=gpu.bandwidth_gbps * 1e9 * bw_eff,
        compute_flops=compute_tflops(gpu, dtype) * 1e12 * mfu,
        comm_latency_s=comm_latency,
        comm_s_per_token=comm_per_token,
        overhead_s=(MLA_LAYER_OVERHEAD_S if model.mla else LAYER_OVERHEAD_S) * model.layers,
        floor_s=STEP_OVERHEAD_S,
        bw_eff=bw_eff,
        decode_time_scale=(dep_cal.decode_time_scale or 1.0) if dep_cal else 1.0,
        prefill_time_scale=(dep_cal.prefill_time_scale or 1.0) if dep_cal else 1.0,
        sparse_topk=model.index_topk,
        **sparse,
    )


def perf_for(dep: Deployment, plan: MemoryPlan) -> PerfModel:
    """The perf model of a deployment as planned (its calibration included). Under vLLM's hybrid KV cache
    manager a context token is read by the full-attention layers alone (``kv_bytes_per_token``); the local
    layers read their window or state, which the engine adds per sequence (``LocalAttention``). The
    prefill's attention FLOPs leave linear-attention and Mamba layers out; they still count every
    sliding-window layer over the whole prompt (a bound: past the window such a layer attends to fewer
    tokens)."""
    perf = perf_model(
        dep.model, dep.gpu, dep.tp, plan.dtype, plan.kv_cache_dtype, calibration=dep.calibration
    )
    local = plan.local
    if local is None:
        return perf
    share = local.full_share
    if local.recurrent:  # linear attention and Mamba attend to no pairs: their cost is in their projections
        return replace(
            perf,
            kv_bytes_per_token=perf.kv_bytes_per_token * share,
            attn_flops_per_pair=perf.attn_flops_per_pair * share,
        )
    return replace(perf, kv_bytes_per_token=perf.kv_bytes_per_token * share)
