"""The demand forecast's error on the real traces and on synthetic histories, as the service would see it.

Each history is a minute series of demand (req/s, with the Poisson noise a minute's count has at that rate):
the ServeGen 600 s aggregates (14 days: m-large, m-mid, m-small; one day: mm-image, deepseek-r1; collection
gaps filled as the simulator fills them) scaled to a mean of ``MEAN_RPS``, the one-hour Azure and Mooncake
replays counted per minute, and two synthetic ones: ``weekly`` (three weeks of business hours, 10 req/s
on weekdays 09:00-18:00, 0.5 at night and 0.2 all weekend) and ``daily`` (two weeks of the same daily sine
every day, 4 to 12 req/s: no weekly pattern).

From the tenth minute on, every minute, ``policies.forecast`` is run on the history
up to then (at most ``HISTORY_DAYS`` days) over the example configs' horizon of ``HORIZON_S`` and judged
through the service's own ``remember`` / ``judge``: near-term MAPE and the upper quantile's coverage. Every
hour, ``hourly`` forecasts the next ``HOURS`` whole hours, each judged against that hour's mean: hourly MAPE
and coverage of its upper value. A trace under a day long has no seasonal part (level and trend only).

``python -m benchmarks.forecast_error [--json] [--only NAME]``; needs ``FLEET_TRACES_DIR`` (the traces);
never run by the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from policies import forecast as fc
from policies.model import DemandSeries, ForecastState

HORIZON_S = 360.0
HISTORY_DAYS = 15  # enough for a week ago and the week before it (the weekly reference's measured error)
HOURS = 24
MEAN_RPS = 20.0
START = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)  # a Monday: the synthetic week's day 0


def _noisy(rates: list[float], seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for r in rates:
        lam = r * 60.0
        out.append(max(0.0, rng.gauss(lam, math.sqrt(lam)) if lam > 0 else 0.0) / 60.0)
    return out


def _servegen(name: str) -> list[float]:
    from fleet.sim.workload import load_servegen, servegen_path

    curve = load_servegen(servegen_path(name))
    rates = [w.rate_rps for w in curve.windows for _ in range(int(curve.window_s // 60))]
    mean = sum(rates) / len(rates)
    return _noisy([r * MEAN_RPS / mean for r in rates], seed=1)


def _replay(name: str) -> list[float]:
    from fleet.sim.workload import load_columns, traces_dir

    reqs = load_columns(traces_dir() / name)
    n = int(max(r.arrival_s for r in reqs) // 60) + 1
    counts = [0] * n
    for r in reqs:
        counts[int(r.arrival_s // 60)] += 1
    return [c / 60.0 for c in counts]


def _synthetic(days: int, fn: Callable[[int, float], float]) -> list[float]:
    return _noisy([fn(m // 1440, (m % 1440) / 60.0) for m in range(days * 1440)], seed=2)


def _weekly(day: int, hour: float) -> float:
    if day % 7 >= 5:
        return 0.2
    ramp = min(1.0, max(0.0, hour - 8.0)) * min(1.0, max(0.0, 18.0 - hour))
    return 0.5 + 9.5 * ramp


def _daily(day: int, hour: float) -> float:
    return 8.0 + 4.0 * math.sin((hour - 9.0) / 24.0 * 2 * math.pi)


HISTORIES: dict[str, Callable[[], list[float]]] = {
    "servegen m-large (14 d)": lambda: _servegen("language_m-large"),
    "servegen m-mid (14 d)": lambda: _servegen("language_m-mid"),
    "servegen m-small (14 d)": lambda: _servegen("language_m-small"),
    "servegen mm-image (1 d)": lambda: _servegen("multimodal_mm-image"),
    "servegen deepseek-r1 (1 d)": lambda: _servegen("reason_deepseek-r1"),
    "azure conv (1 h)": lambda: _replay("azure2023_conv.csv"),
    "azure code (1 h)": lambda: _replay("azure2023_code.csv"),
    "mooncake conversation (1 h)": lambda: _replay("mooncake_fast25_conversation.jsonl"),
    "synthetic weekly (21 d)": lambda: _synthetic(21, _weekly),
    "synthetic daily (14 d)": lambda: _synthetic(14, _daily),
}


def _pct(errs: list[float]) -> float | None:
    return round(100.0 * sum(errs) / len(errs), 2) if errs else None


def _wape(pairs: list[tuple[float, float]]) -> float | None:
    total = sum(a for _, a in pairs)
    return round(100.0 * sum(e for e, _ in pairs) / total, 2) if total > 0 else None


def evaluate(values: list[float]) -> dict[str, Any]:
    """Near-term and hourly MAPE (%) and coverage of the upper value over ``values`` (one a minute)."""
    keep = int(HISTORY_DAYS * 1440)
    state = ForecastState()
    near_err: list[float] = []
    near_abs: list[tuple[float, float]] = []  # (|error|, actual): the WAPE, which no near-zero minute rules
    hour_abs: list[tuple[float, float]] = []
    near_cov: list[bool] = []
    hour_err: list[float] = []
    hour_cov: list[bool] = []
    hour_means = {}
    for h in range(len(values) // 60):
        chunk = values[h * 60 : (h + 1) * 60]
        hour_means[START + timedelta(hours=h)] = sum(chunk) / len(chunk)
    ahead = int(HORIZON_S // 60)
    for i in range(10, len(values)):
        now = START + timedelta(minutes=i)
        lo = max(0, i + 1 - keep)
        series = DemandSeries.model_construct(
            start=START + timedelta(minutes=lo), step_s=60.0, rps=list(values[lo : i + 1])
        )
        state = fc.judge(state, now, values[i])
        f = fc.forecast(series, now, HORIZON_S, state)
        state = fc.remember(state, now, f, HORIZON_S)
        if f.points and i + ahead < len(values) and values[i + ahead] > 1e-6:
            actual = values[i + ahead]
            predicted = f.points[-1][1]
            near_err.append(abs(actual - predicted) / actual)
            near_abs.append((abs(actual - predicted), actual))
            near_cov.append(actual <= predicted * f.band + 1e-9)
        if now.minute == 0:
            for hf in fc.hourly(series, now, HOURS, state, horizon_s=HORIZON_S):
                actual = hour_means.get(hf.start)
                if actual is not None and actual > 1e-6:
                    hour_err.append(abs(actual - hf.mean_rps) / actual)
                    hour_abs.append((abs(actual - hf.mean_rps), actual))
                    hour_cov.append(actual <= hf.upper_rps + 1e-9)
    return {
        "near_mape_pct": _pct(near_err),
        "near_wape_pct": _wape(near_abs),
        "near_coverage": round(sum(near_cov) / len(near_cov), 3) if near_cov else None,
        "near_n": len(near_err),
        "hourly_mape_pct": _pct(hour_err),
        "hourly_wape_pct": _wape(hour_abs),
        "hourly_coverage": round(sum(hour_cov) / len(hour_cov), 3) if hour_cov else None,
        "hourly_n": len(hour_err),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forecast_error")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", default=None, help="histories whose name contains this")
    args = parser.parse_args(argv if argv is not None else [])
    out: dict[str, Any] = {}
    for name, make in HISTORIES.items():
        if args.only and args.only not in name:
            continue
        out[name] = evaluate(make())
        if not args.json:
            r = out[name]
            print(
                f"{name:30} near MAPE {r['near_mape_pct']}% WAPE {r['near_wape_pct']}% cov "
                f"{r['near_coverage']} (n {r['near_n']}); hourly MAPE {r['hourly_mape_pct']}% WAPE "
                f"{r['hourly_wape_pct']}% cov {r['hourly_coverage']} (n {r['hourly_n']})",
                flush=True,
            )
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
