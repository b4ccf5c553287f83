"""The sizing model's time per token against the batch, and the decode knee (where TPOT reaches 1.5x its
batch-1 value)."""

from __future__ import annotations

import pytest

from fleet.diagnose import fixes
from fleet.diagnose.model import GroupContext

TP2_A10 = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}  # 2 x A10 over PCIe
A100_40G = {"model": "Llama-3.1-8B", "instance_type": "ecs.gn7-c12g1.3xlarge"}  # one A100-40G


@pytest.mark.parametrize(("group", "tokens_per_seq"), [(TP2_A10, 1300.0), (A100_40G, 600.0)])
def test_expected_tpot_never_falls_as_the_batch_grows(group: dict[str, str], tokens_per_seq: float) -> None:
    ctx = GroupContext(name="chat", **group)
    tpots = [fixes.expected_tpot_ms(ctx, n, tokens_per_seq) for n in range(1, 257)]
    assert all(t is not None for t in tpots)
    falls = [(n + 1, a, b) for n, (a, b) in enumerate(zip(tpots, tpots[1:], strict=False)) if b < a - 1e-9]
    assert not falls, falls[:3]


def test_the_knee_is_where_the_decode_step_reaches_1_5x_its_batch_1_time() -> None:
    ctx = GroupContext(name="chat", **A100_40G)
    knee = fixes.knee_batch(ctx, 600.0)
    assert knee is not None
    alone = fixes.expected_tpot_ms(ctx, 1, 600.0)
    at_knee = fixes.expected_tpot_ms(ctx, knee, 600.0)
    past = fixes.expected_tpot_ms(ctx, knee + 1, 600.0)
    assert alone is not None and at_knee is not None and past is not None
    assert at_knee <= fixes.KNEE_TPOT_FACTOR * alone < past
