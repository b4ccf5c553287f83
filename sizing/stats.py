"""Percentiles, two estimators, each where its numbers must match something.

* :func:`percentile` interpolates linearly between order statistics (q in 0..1): smooth in the inputs, which
  the sizing search's comparisons across candidates want.
* :func:`nearest_rank` picks the sample at rank ceil(pct/100 x n) (pct in 0..100) of sorted values: always a
  value that was observed, as the simulator's per-minute vLLM gauges and its run summaries report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def nearest_rank(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of already sorted values (0 for none)."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(pct / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]
