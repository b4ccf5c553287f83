"""How far the simulated world's engines stray from the sizing engine that the controllers plan with.

If the world ran exactly the model the capacity planner uses, a capacity model would be judged against
itself. With ``--model-error PCT`` every engine of the world runs at a speed ``1 + e`` times what the sizing
engine predicts, where ``e`` is the sum of a bias drawn once per run, uniform in ``[-PCT, +PCT]`` (the model
is wrong for this deployment: a different driver, a different prompt mix), and a spread drawn per instance,
uniform in ``[-PCT/4, +PCT/4]`` (cards and hosts differ), clipped to ``[-PCT, +PCT]``. Both come from the
run's seed, so a run is repeatable; the controllers and the capacity test never see them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# The share of the error range that one instance may differ from the run's bias.
INSTANCE_SPREAD = 0.25
MAX_MODEL_ERROR_PCT = 90.0  # an engine at 10 % of its predicted speed is already another machine


@dataclass(frozen=True)
class ModelError:
    """The run's draw: ``bias`` (a fraction, +0.1 = 10 % faster than predicted) and the range ``pct``."""

    pct: float
    seed: int
    bias: float

    @classmethod
    def draw(cls, pct: float, seed: int) -> ModelError:
        if not 0.0 <= pct <= MAX_MODEL_ERROR_PCT:
            raise ValueError(f"model error must be between 0 and {MAX_MODEL_ERROR_PCT:g} %, got {pct:g}")
        frac = pct / 100.0
        bias = random.Random(f"model-error-run:{seed}").uniform(-frac, frac) if frac else 0.0
        return cls(pct=pct, seed=seed, bias=bias)

    def speed(self, ordinal: int) -> float:
        """The speed factor of the ``ordinal``-th instance the world has seen (0-based)."""
        frac = self.pct / 100.0
        if not frac:
            return 1.0
        spread = random.Random(f"model-error-instance:{self.seed}:{ordinal}").uniform(
            -INSTANCE_SPREAD * frac, INSTANCE_SPREAD * frac
        )
        return 1.0 + max(-frac, min(frac, self.bias + spread))
