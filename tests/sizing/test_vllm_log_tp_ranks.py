# ruff: noqa: E501  (log lines are written as vLLM prints them)
"""Startup logs of tensor-parallel engines whose ranks print different figures: the per-GPU figures read are the
tightest rank's, the one with the least KV cache memory, by which vLLM sizes every rank's pool
(``unify_kv_cache_configs`` in vllm/v1/core/kv_cache_utils.py; the minimum of the workers' block counts in V0).
The lines are in the shapes of vLLM's own log calls; the numbers are made up, with the ranks a little apart as
on real cards (one rank holding a padded share of the vocabulary, another a larger CUDA context)."""

from __future__ import annotations

import itertools

import pytest

from sizing import Deployment, find_gpu, find_model
from sizing.calibration import calibrate
from sizing.vllm_log import parse_startup_log

# (weights GiB, available KV GiB) per rank: rank 1 holds the most and is left the least
TP2 = ((13.76, 56.40), (13.93, 56.21))
TP4 = ((7.02, 62.50), (7.02, 62.48), (7.19, 62.31), (7.02, 62.47))

_HEAD = (
    "(APIServer pid=1) INFO 10-02 09:00:00 [api_server.py:1896] vLLM API server version 0.10.2\n"
    "(APIServer pid=1) INFO 10-02 09:00:00 [utils.py:328] non-default args: {'model': 'Qwen/Qwen3-14B', "
    "'max_model_len': 32768, 'gpu_memory_utilization': 0.9, 'tensor_parallel_size': 2}\n"
)


def _v1_rank(
    rank: int, weights: float, kv: float, prefix: str = "VllmWorker rank={rank} pid={pid}"
) -> list[str]:
    p = "(" + prefix.format(rank=rank, pid=700 + rank) + ") INFO 10-02 09:00:{s:02d}"
    return [
        f"{p.format(s=10)} [gpu_model_runner.py:2007] Model loading took {weights:.2f} GiB memory and 9.1 seconds\n",
        f"{p.format(s=30)} [gpu_worker.py:276] Available KV cache memory: {kv:.2f} GiB\n",
    ]


def _v1_log(ranks: tuple[tuple[float, float], ...], order: tuple[int, ...], prefix: str) -> str:
    per_rank = {rank: _v1_rank(rank, *ranks[rank], prefix=prefix) for rank in range(len(ranks))}
    lines = [line for step in zip(*(per_rank[r] for r in order), strict=True) for line in step]
    tokens = int(min(kv for _, kv in ranks) * 2**30 / 81920)
    return (
        _HEAD
        + "".join(lines)
        + f"(EngineCore_0 pid=600) INFO 10-02 09:00:31 [kv_cache_utils.py:864] GPU KV cache size: {tokens:,} tokens\n"
    )


@pytest.mark.parametrize(
    "prefix",
    [
        "VllmWorker rank={rank} pid={pid}",
        "Worker_TP{rank} pid={pid}",
        "RayWorkerWrapper pid={pid}, ip=10.0.0.{rank}",
    ],
)
def test_the_weights_are_the_tightest_ranks_whatever_order_the_ranks_printed_in(prefix):
    for order in itertools.permutations(range(2)):
        facts = parse_startup_log(_v1_log(TP2, order, prefix))
        assert (facts.weights_gib, facts.kv_cache_gib) == (13.93, 56.21), order


def test_tp4_reads_the_rank_with_the_least_kv_memory():
    for order in ((0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)):
        facts = parse_startup_log(_v1_log(TP4, order, "Worker_TP{rank} pid={pid}"))
        assert (facts.weights_gib, facts.kv_cache_gib) == (7.19, 62.31), order


def _v0_rank(prefix: str, weights: float, non_torch: float, activation: float, kv: float) -> str:
    p = f"{prefix}INFO 04-12 08:21:19 [worker.py:267]"
    return (
        f"{p} Memory profiling takes 17.59 seconds\n"
        f"{p} the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.90) = 71.24GiB\n"
        f"{p} model weights take {weights:.2f}GiB; non_torch_memory takes {non_torch:.2f}GiB; PyTorch activation "
        f"peak memory takes {activation:.2f}GiB; the rest of the memory reserved for KV Cache is {kv:.2f}GiB.\n"
    )


def test_v0_ray_workers_and_the_unprefixed_driver_keep_one_ranks_split():
    # the driver (rank 0) prints without a prefix; rank 2 has the largest activation peak and the least KV
    text = (
        _v0_rank("", 7.02, 0.61, 1.20, 62.41)
        + _v0_rank("(RayWorkerWrapper pid=811, ip=10.0.0.2) ", 7.02, 0.55, 1.20, 62.47)
        + _v0_rank("(RayWorkerWrapper pid=812, ip=10.0.0.2) ", 7.02, 0.52, 1.44, 62.26)
        + _v0_rank("(RayWorkerWrapper pid=813, ip=10.0.0.2) ", 7.02, 0.55, 1.20, 62.47)
    )
    facts = parse_startup_log(text)
    assert facts.kv_cache_gib == 62.26
    # that rank's own split, which adds up with its KV figure to the usable memory (not the driver's 0.61)
    assert (facts.weights_gib, facts.non_torch_gib, facts.activation_gib) == (7.02, 0.52, 1.44)


def test_calibrate_charges_the_overhead_of_one_rank_not_a_mix_of_two():
    facts = parse_startup_log(_v1_log(TP2, (0, 1), "VllmWorker rank={rank} pid={pid}"))
    dep = Deployment(find_model("Qwen3-14B"), find_gpu("A100-80G"), 2, max_model_len=32768)
    cal = calibrate(facts, dep)
    assert cal.weights_gib == 13.93
    overhead = next(t for t in cal.terms if t.name == "overhead_gib")
    # rank 1's own usable memory less its own weights and KV cache
    assert overhead.logged == pytest.approx(find_gpu("A100-80G").visible_gib * 0.9 - 13.93 - 56.21)
