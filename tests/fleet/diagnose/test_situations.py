"""Situations an operator meets that the rules were not built around: each must get the cause that fixes it
(or none, or a clear note of what is missing), not the nearest look-alike."""

from __future__ import annotations

from diagnose_windows import make_window

from fleet.diagnose.model import Finding, Window
from fleet.diagnose.rules import diagnose

SIZED = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}  # 2 x A10, 48,896 KV tokens


def findings(window: Window) -> list[Finding]:
    return diagnose(window)


def test_kv_cache_full_with_preemptions_at_max_num_seqs_is_kv_pressure() -> None:
    # The batch reached max_num_seqs too, but vLLM preempted: the KV cache, not the cap, is what ran out.
    w = make_window(
        {
            "*": {
                "requests_running": 62.0,
                "queue_waiting": 8.0,
                "kv_cache_usage_pct": 97.0,
                "gpu_util_pct": 100.0,
                "ttft_p99_ms": 5000.0,
                "preemptions": 3.0,
            }
        },
        group={**SIZED, "max_num_seqs": 64},
    )
    found = findings(w)
    assert [f.kind for f in found] == ["kv_cache_pressure"]
    f = found[0]
    assert "preempted" in f.explanation and "max_num_seqs would not help" in f.explanation
    assert "--kv-cache-dtype fp8" in f.fix and "--max-model-len" in f.fix
    assert "raise max_num_seqs" not in f.fix.lower()
