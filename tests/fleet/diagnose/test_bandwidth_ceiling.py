"""``memory_bandwidth_bound`` judges the memory-busy share against the ceiling a bandwidth-limited decode can
reach on the group's deployment (sizing's decode step: weight and KV reads over reads + all-reduces + kernel
cost), and against the fixed 90% where the sizing model does not know the deployment."""

from __future__ import annotations

import pytest
from diagnose_windows import make_window

from fleet.diagnose import fixes
from fleet.diagnose.model import Finding, GroupContext, Window
from fleet.diagnose.rules import diagnose
from fleet.diagnose.rules.shared import BW_BOUND_PCT, BW_NEAR_CEILING

TP2_PCIE = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}  # 2 x A10 over PCIe
TP1 = {"model": "Qwen2.5-7B", "instance_type": "ecs.gn7i-c8g1.2xlarge"}  # one A10
TP4_NVLINK = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7e-c16g1.16xlarge"}  # 4 x A100 over NVLink
BATCH = 66.0
TOKENS_PER_SEQ = 500.0
SLO_TPOT_MS = 45.0


def _ceiling(group: dict[str, str]) -> fixes.BusyCeiling:
    c = fixes.decode_busy_ceiling(GroupContext(name="chat", **group), BATCH, TOKENS_PER_SEQ)
    assert c is not None
    return c


def _window(group: dict[str, str | float], mem_busy_pct: float, tpot_ms: float, kv_tokens: int) -> Window:
    """Four instances decoding BATCH sequences of TOKENS_PER_SEQ context (the KV cache's share of
    ``kv_tokens`` says so), with the memory-busy share and P99 TPOT given, no queue."""
    kv_pct = 100.0 * BATCH * TOKENS_PER_SEQ / kv_tokens
    return make_window(
        {
            "*": {
                "gpu_mem_bw_util_pct": mem_busy_pct,
                "tpot_p99_ms": tpot_ms,
                "requests_running": BATCH,
                "kv_cache_usage_pct": kv_pct,
            }
        },
        group={**group, "slo_tpot_p99_ms": SLO_TPOT_MS},
    )


def _sized_window(group: dict[str, str], mem_busy_pct: float, tpot_ms: float) -> Window:
    d = fixes.deployment(GroupContext(name="chat", **group))
    assert d is not None
    return _window(group, mem_busy_pct, tpot_ms, d.kv_cache_tokens)


def _bandwidth(window: Window) -> Finding | None:
    found = [f for f in diagnose(window) if f.kind == "memory_bandwidth_bound"]
    return found[0] if found else None


def test_ceiling_is_reads_over_the_whole_decode_step() -> None:
    tp2, tp1 = _ceiling(TP2_PCIE), _ceiling(TP1)
    for c in (tp2, tp1):
        assert c.share == pytest.approx(c.read_ms / (c.read_ms + c.comm_ms + c.other_ms))
    assert tp1.comm_ms == 0 and tp1.interconnect == "none"
    assert tp2.comm_ms > 0 and tp2.interconnect == "pcie"
    assert tp2.share < tp1.share < 1.0
    # the PCIe all-reduces carry every batched token: a bigger batch leaves memory idle for longer
    small = fixes.decode_busy_ceiling(GroupContext(name="chat", **TP2_PCIE), 4, TOKENS_PER_SEQ)
    assert small is not None and small.share > tp2.share


def test_unknown_deployment_has_no_ceiling() -> None:
    for group in ({"model": "Qwen2.5-14B"}, {"model": "Qwen2.5-14B", "instance_type": "ecs.made-up"}, {}):
        assert fixes.decode_busy_ceiling(GroupContext(name="chat", **group), BATCH, TOKENS_PER_SEQ) is None


def test_tp2_over_pcie_near_its_ceiling_with_tpot_over_slo_is_bandwidth_bound() -> None:
    c = _ceiling(TP2_PCIE)
    assert 100 * c.share < BW_BOUND_PCT  # the fixed threshold is out of this deployment's reach
    busy = 100 * c.share - 3.0  # under the ceiling, above BW_NEAR_CEILING of it
    assert busy >= 100 * BW_NEAR_CEILING * c.share
    finding = _bandwidth(_sized_window(TP2_PCIE, busy, tpot_ms=1.3 * SLO_TPOT_MS))
    assert finding is not None
    assert finding.evidence["threshold"] == "sizing_ceiling"
    inst = next(iter(finding.evidence["instances"].values()))
    assert inst["ceiling"]["tp"] == 2 and inst["ceiling"]["interconnect"] == "pcie"
    assert inst["threshold_pct"] == pytest.approx(100 * BW_NEAR_CEILING * c.share, abs=0.5)
    # the explanation names the ceiling it compared against and what keeps memory idle
    assert f"{100 * c.share:.0f}%" in finding.explanation
    assert "all-reduces over PCIe" in finding.explanation


def test_tp2_near_its_ceiling_with_tpot_within_slo_is_quiet() -> None:
    c = _ceiling(TP2_PCIE)
    assert _bandwidth(_sized_window(TP2_PCIE, 100 * c.share - 3.0, tpot_ms=0.8 * SLO_TPOT_MS)) is None


def test_tp2_well_below_its_ceiling_is_quiet() -> None:
    c = _ceiling(TP2_PCIE)
    below = 100 * BW_NEAR_CEILING * c.share - 5.0  # prefill and idle time, not a bandwidth wall
    assert _bandwidth(_sized_window(TP2_PCIE, below, tpot_ms=1.3 * SLO_TPOT_MS)) is None


def test_tp4_over_nvlink_is_judged_against_its_own_ceiling() -> None:
    c = _ceiling(TP4_NVLINK)
    assert c.interconnect == "nvlink" and 100 * c.share < BW_BOUND_PCT
    finding = _bandwidth(_sized_window(TP4_NVLINK, 100 * c.share - 2.0, tpot_ms=1.3 * SLO_TPOT_MS))
    assert finding is not None
    assert "all-reduces over NVLink" in finding.explanation


def test_tp1_ceiling_is_near_full_and_keeps_the_bar_near_90() -> None:
    c = _ceiling(TP1)
    bar = 100 * BW_NEAR_CEILING * c.share
    assert 85.0 < bar <= BW_BOUND_PCT
    hit = _bandwidth(_sized_window(TP1, bar + 2.0, tpot_ms=1.3 * SLO_TPOT_MS))
    assert hit is not None
    assert hit.evidence["threshold"] == "sizing_ceiling"
    inst = next(iter(hit.evidence["instances"].values()))
    assert inst["ceiling"]["tp"] == 1 and inst["ceiling"]["allreduce_ms"] == 0
    assert "all-reduces" not in hit.explanation
    assert _bandwidth(_sized_window(TP1, bar - 4.0, tpot_ms=1.3 * SLO_TPOT_MS)) is None


@pytest.mark.parametrize(
    "group", [{}, {"model": "Qwen2.5-14B"}, {"model": "Qwen2.5-14B", "instance_type": "x"}]
)
def test_unknown_deployment_falls_back_to_the_fixed_threshold(group: dict[str, str]) -> None:
    kv_tokens = 100_000  # any: without a deployment the context per sequence feeds no ceiling
    assert _bandwidth(_window(group, BW_BOUND_PCT - 8.0, 1.3 * SLO_TPOT_MS, kv_tokens)) is None
    finding = _bandwidth(_window(group, BW_BOUND_PCT + 4.0, 1.3 * SLO_TPOT_MS, kv_tokens))
    assert finding is not None
    assert finding.evidence["threshold"] == "fixed"
    assert finding.evidence["threshold_pct"] == BW_BOUND_PCT
    assert "fixed threshold" in finding.explanation
    assert "does not know this model or instance type" in finding.explanation
