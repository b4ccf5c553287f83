"""benchmarks/tick_forecast.py runs and says what it measured (its figures are never asserted: not timed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest


def _load():
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "tick_forecast.py"
    spec = importlib.util.spec_from_file_location("tick_forecast", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tick_forecast", module)
    spec.loader.exec_module(module)
    return module


tick_forecast = _load()


def test_json_is_one_clean_object_on_stdout_with_both_modes(capsys):
    tick_forecast.main(["--json", "--ticks", "2", "--inline"])
    out = capsys.readouterr().out
    res = json.loads(out)  # nothing but the object on stdout (the progress bar is on stderr)
    assert res["ticks"] == 2 and res["observe_mode"] == "inline"
    for mode in ("off", "on"):
        assert res[mode]["errors"] == []
        for part in ("tick", "service", "fake_cloud", "observe", "tick_without_observe", "decide"):
            assert res[mode][part]["median_ms"] > 0
        # the fake's answers are part of the tick, and the service's own CPU is the rest
        assert res[mode]["service"]["mean_ms"] == pytest.approx(
            res[mode]["tick"]["mean_ms"] - res[mode]["fake_cloud"]["mean_ms"], abs=0.01
        )
    # the week of history is read: the forecast is seasonal; its demand signals are more reads
    assert res["forecast_methods"] == ["seasonal"]
    assert res["on"]["api_calls_per_tick"] > res["off"]["api_calls_per_tick"]
    assert res["ok"] == (res["ratio_per_minute"]["service"] <= res["target_ratio"])


def test_the_per_minute_figure_counts_the_tick_that_reads_once_a_minute():
    # three cheap ticks and one that pays for the once-a-minute reads, three minutes over
    figures = tick_forecast._ms([0.001, 0.001, 0.001, 0.005] * 3)
    assert figures["median_ms"] == 1.0  # the median over ticks never sees the dear one
    assert figures["per_minute_ms"] == 2.0 and figures["mean_ms"] == 2.0


def test_a_bad_tick_count_is_refused_in_one_line(capsys):
    assert tick_forecast.main(["--ticks", "0"]) == 2
    assert capsys.readouterr().err.strip() == "--ticks must be at least 1"
