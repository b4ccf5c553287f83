"""``--history-days N``: the demand history a service would have after N days in production, written
quickly.

For a ServeGen workload of day ``d``, the history is the demand of days ``d-N .. d-1`` of the same trace (and
the hours of day ``d`` before the run's ``start_h``), scaled exactly as the run's day is, one row a minute
with the scatter a minute's count has when arrivals come as the run draws them: Gamma inter-arrival gaps at
each window's recorded CV (``cv_cap`` as the run's), whose minute counts have a variance of CV^2 times their
mean (a renewal process's; CV 1 is Poisson's), drawn as a Gamma count of that mean and variance. Before,
every minute had Poisson noise alone, so a history of clumpy windows (m-mid's) read as smooth, and nothing
learned from it (the dispersion, the seasonal levels) had seen a clump.

No engine runs: these are the demand-level metrics the service records (``demand_samples``), not requests. A
trace without preceding days (a per-request replay) has no history to give: the run says so and the forecast
starts from level and trend.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

from fleet.service.demand import DemandReading
from fleet.sim.workload import (
    RateCurve,
    WorkloadError,
    WorkloadSpec,
    curve_offset_s,
    curve_sizes,
    cv_cap_of,
    fills_gaps,
    load_servegen,
    servegen_path,
    traces_dir,
    window_cv,
)

MAX_HISTORY_DAYS = 14


def _scale(curve: RateCurve, duration_s: float, peak_rps: float, offset_s: float) -> float:
    """The factor ``from_rate_curve`` applies to the run's day (its highest covered window is the peak)."""
    span_s = len(curve.windows) * curve.window_s
    n = int(math.ceil(duration_s / curve.window_s)) + 1
    covered = [
        curve.windows[int(((i * curve.window_s + offset_s) % span_s) // curve.window_s)] for i in range(n)
    ]
    top = max(w.rate_rps for w in covered)
    if top <= 0:
        raise WorkloadError(f"{curve.name}: the selected windows have no traffic")
    return peak_rps / top


def history_rows(
    spec: WorkloadSpec, days: int, run_start: datetime, duration_s: float, *, seed: int = 0
) -> tuple[list[DemandReading], str]:
    """Minute rows of demand before ``run_start``, and a line saying what they are."""
    if days <= 0:
        return [], ""
    if spec.kind != "servegen":
        return [], f"--history-days: {spec.kind} traces have no preceding days; the forecast starts without"
    directory = traces_dir()
    full = load_servegen(servegen_path(spec.name, directory), fill_gaps=fills_gaps(spec))
    p = spec.params
    day = int(float(p.get("day", "0")))
    offset_s = float(p.get("start_h", "0")) * 3600.0
    scale = _scale(full, duration_s, float(p.get("peak", "20")), curve_offset_s(spec))
    sizes = curve_sizes(spec, directory)
    prompt = sum(r.prompt_tokens for r in sizes) / len(sizes)
    output = sum(r.output_tokens for r in sizes) / len(sizes)
    cv_cap = cv_cap_of(spec)
    rng = random.Random(seed * 7919 + 16)
    midnight = run_start - timedelta(seconds=offset_s)
    first = max(0, day - days)
    rows: list[DemandReading] = []
    for d in range(first, day + 1):
        curve = full.day(d)
        base = midnight - timedelta(days=day - d)
        for w in curve.windows:
            for minute in range(int(curve.window_s // 60)):
                at = base + timedelta(seconds=w.start_s + 60 * minute)
                if at >= run_start:
                    break
                mean = w.rate_rps * scale * 60.0
                count = _minute_count(rng, mean, window_cv(w.iat_cv, cv_cap)) if mean > 0 else 0.0
                rows.append(DemandReading(at, count / 60.0, prompt, output))
    got = day - first
    note = f"history: {got} day(s) of {spec.name} before day {day} ({len(rows)} minutes)"
    if got < days:
        note += f"; the trace has no day before day {first}"
    return rows, note


def _minute_count(rng: random.Random, mean: float, cv: float) -> float:
    """A minute's arrivals: a Gamma draw of ``mean`` and variance ``cv**2 x mean``, never negative."""
    k = mean / (cv * cv)
    return rng.gammavariate(k, mean / k)
