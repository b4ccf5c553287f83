"""The demand signals of one group, read once per tick before any step decides (like ``signals.py`` for the
rules): the observed arrival rate and token mix, the forecast over the horizon, the capacity per instance
after the online correction, and the instances the forecast needs.

The only writes to the history are here: the forecast's record (``forecast.judge`` / ``remember``) and the
correction. The correction moves the sizing engine's capacity towards what the fleet really does, a little per
tick. It is the product of two factors, each within ``1 +/- correction_bound`` (they measure different
things: one bound over both let the feedback, which clumps pull down on any engine, use up the room a slow
engine needs):

* the engines' **speed** against the model's, from Little's law: at its arrival rate ``r`` an instance should
  hold ``r x`` the model's mean time in service (``DemandInputs.in_service``) requests running; one slower
  than the model holds more, at any load. The speed is the ratio of two moving means (``SPEED_TAU_S``) of
  the running requests, modelled over observed, summed over the instances; a tick adds to them only in a
  steady state (every instance within the modelled capacity, P99 TTFT within the SLO, the queues short: a
  burst piles requests up in the batch, which reads as a slow engine on any engine) and with enough requests
  running to mean something. It only ever lowers the capacity: fewer running requests than modelled also
  come from a mix whose requests are shorter than its means say (measured: 4-15 % on the Azure conversation
  sizes), and a capacity promised too high costs the SLO where one too low costs GPU-hours, which the
  feedback wins back;
* the **feedback** from the SLO: down when P99 TTFT breaks the SLO while the instances run at least half
  loaded and within the capacity promised (the model promised more than they deliver; beyond it the fleet is
  short, which breaks the SLO on any engine: a stock-out, max_size, a ramp the orders have not caught up
  with); up when they run at ``UP_LOADED`` or more with P99
  TTFT under half the SLO and the KV cache under half full (they deliver more than promised).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policies import forecast as fc
from policies import metrics as m
from policies.launch_verdicts import engine_up
from policies.model import (
    ForecastState,
    GroupHistory,
    PlanWarning,
    Recommendation,
    Scalar,
    WarningCode,
)
from policies.observe import freshness
from policies.scaling.context import ScalingInputs
from policies.spec import Predictive, PredictiveMode

CORRECTION_DOWN = 0.98  # per tick with the SLO broken under load
CORRECTION_UP = 1.005  # per tick with slack at the modelled capacity
LOADED = 0.5  # utilization (observed / corrected capacity) above which a broken SLO blames the model
OVERLOADED = 1.0  # ... and up to which: beyond the capacity promised the fleet is short, not the engines slow
KV_SLACK_PCT = 50.0
UP_LOADED = 0.6  # utilization from which a P99 TTFT under half the SLO says the model is pessimistic
SPEED_TAU_S = 900.0  # the moving means' time constant: running requests swing by a third minute to minute
SPEED_SAMPLE_S = 60.0  # the most one reading weighs (a tick after a gap is one reading, not the gap's worth)
SPEED_MIN_RUNNING = 20.0  # requests the model expects running over the instances: below it, noise
QUEUED_SHARE = 0.25  # waiting over running above which the engines are full and the estimate is not read


@dataclass
class Demand:
    """The group's demand now: the sum of the InService instances' arrival rates and the mean token mix."""

    rps: float | None = None
    complete: bool = False  # every InService instance reported a fresh rate (those still loading aside)
    reporting: int = 0  # instances whose rate is in rps
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    ttft_p99_ms: float | None = None
    kv_pct: float | None = None
    running: list[tuple[float, float]] = field(default_factory=list)  # (rate, running requests) per instance
    waiting: float | None = None  # requests waiting, summed over the instances in ``running``
    down: list[str] = field(default_factory=list)  # InService instances whose agent reports vLLM down


@dataclass
class DemandSignals:
    """What the predictive step reads (``read_demand``); ``target`` None: the demand is unknown."""

    mode: PredictiveMode
    demand: Demand
    forecast: fc.Forecast
    capacity_model_rps: float | None
    capacity_rps: float | None  # after the correction
    correction: float
    speed: float
    burstiness: float
    target: int | None = None
    need_now: int | None = None  # instances the observed demand needs (headroom included)
    window_target: int | None = None  # the highest target of the scale-in window: scale-in goes no lower
    mean_need: int | None = None  # instances the forecast's mean path (or the observed demand) needs
    burst_need: int | None = None  # the scale-in window's busiest minute, square-root headroom only
    horizon_s: float = 0.0  # how far ahead the forecast looked
    inputs: dict[str, Scalar] = field(default_factory=dict)
    warnings: list[PlanWarning] = field(default_factory=list)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def observed_demand(inp: ScalingInputs, load_s: float) -> Demand:
    """Sum of the InService instances' fresh arrival rates and their rate-weighted token mix.

    An instance younger than a launch's load time (``load_s``: the cold start, or what launches here were seen
    to take, ``load_time_s``; plus the staleness allowance) that has never reported a rate is still loading
    its weights: the balancer sends it nothing yet, so its silence leaves the demand complete. So does one
    whose agent reports vLLM down (a fresh ``vllm_up`` of 0: crashed, or a launch that never came up): it
    serves nothing, which is known, not missing. Without that, one dead engine waiting for a human held every
    scale-in of its group.
    """
    stale_after_s = inp.spec.stabilization.stale_after_s
    is_fresh = freshness(inp.now, stale_after_s)
    rates: list[float] = []
    prompts: list[tuple[float, float]] = []
    outputs: list[tuple[float, float]] = []
    ttfts: list[float] = []
    kvs: list[float] = []
    running: list[tuple[float, float]] = []
    waiting: list[float] = []
    loading = 0
    down: list[str] = []
    loading_s = load_s + stale_after_s
    for inst in inp.view.serving:
        sample = inst.metrics.get(m.REQUEST_RATE)
        if sample is None and _loading(inst.created_at, inp.now, loading_s):
            loading += 1
            continue
        if (sample is None or not is_fresh(sample)) and engine_up(inst, inp.now, stale_after_s) is False:
            down.append(inst.instance_id)  # its agent says vLLM is down: the balancer sends it nothing
            continue
        if sample is None or not is_fresh(sample):
            continue
        rates.append(sample.value)
        for name, into in ((m.PROMPT_TOKENS_PER_REQUEST, prompts), (m.OUTPUT_TOKENS_PER_REQUEST, outputs)):
            tok = inst.metrics.get(name)
            if tok is not None and is_fresh(tok):
                into.append((tok.value, max(sample.value, 1e-6)))
        for name, vals in ((m.TTFT_P99_MS, ttfts), (m.KV_CACHE_USAGE_PCT, kvs)):
            other = inst.metrics.get(name)
            if other is not None and is_fresh(other):
                vals.append(other.value)
        run = inst.metrics.get(m.REQUESTS_RUNNING)
        if run is not None and is_fresh(run):
            running.append((sample.value, run.value))
            queued = inst.metrics.get(m.QUEUE_WAITING)
            if queued is not None and is_fresh(queued):
                waiting.append(queued.value)
    n = len(inp.view.serving) - loading - len(down)
    if not rates:
        return Demand(down=down)

    def weighted(pairs: list[tuple[float, float]]) -> float | None:
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if pairs and total > 0 else None

    return Demand(
        rps=sum(rates),  # a fresh instance not reporting yet has had little traffic: not scaled up
        complete=len(rates) >= n,
        reporting=len(rates),
        prompt_tokens=weighted(prompts),
        output_tokens=weighted(outputs),
        ttft_p99_ms=_mean(ttfts),
        kv_pct=_mean(kvs),
        running=running,
        waiting=sum(waiting) if len(waiting) == len(running) else None,
        down=down,
    )


def _loading(created_at: datetime | None, now: datetime, loading_s: float) -> bool:
    if created_at is None:
        return False  # no age known: its silence is missing data
    return 0 <= (now - created_at).total_seconds() < loading_s


def staffing(load: float, beta: float, burst: float) -> int:
    """Square-root staffing: R + beta x sqrt(R) x sqrt((1 + IDC) / 2) servers for an offered load of R."""
    if load <= 0:
        return 0
    return math.ceil(load + beta * math.sqrt(load) * math.sqrt((1.0 + burst) / 2.0) - 1e-9)


def _correct(inp: ScalingInputs, state: ForecastState, d: Demand, model_rps: float) -> ForecastState:
    """The forecast state after this tick's correction: the speed (its moving means advanced) times the SLO's
    feedback."""
    bound = inp.spec.predictive.correction_bound
    k = state.correction
    feedback = k / state.speed
    state = _speed(inp, state, d)
    n = d.reporting  # those still loading serve nothing: counting them reads a short fleet as a slow model
    slo = inp.spec.slo_ttft_p99_ms
    if d.rps is not None and d.complete and n and slo is not None and d.ttft_p99_ms is not None:
        util = d.rps / n / (model_rps * k)
        if d.ttft_p99_ms > slo and LOADED <= util <= OVERLOADED:
            feedback *= CORRECTION_DOWN
        elif (
            util >= UP_LOADED and d.ttft_p99_ms < 0.5 * slo and (d.kv_pct is None or d.kv_pct < KV_SLACK_PCT)
        ):
            feedback *= CORRECTION_UP
    return state.model_copy(update={"correction": state.speed * _clip(feedback, bound)})


def engine_of(pred: Predictive) -> str:
    """What the capacity per instance is of: the engine the sizing engine models, or the measured value."""
    if pred.capacity_rps is not None:
        return f"measured {pred.capacity_rps:g}"
    engine = f"{pred.model} on {pred.instance_type} tp={pred.tp} max_model_len={pred.max_model_len}"
    # only the settings the section sets: a state learned before they existed stays on its engine
    return engine + "".join(f" {name}={value:g}" for name, value in pred.vllm_settings.items())


def _for_engine(state: ForecastState, pred: Predictive) -> ForecastState:
    """The state with the correction started again from the model when the group's engine changed (another
    model, instance type, TP, context or vLLM setting, or a new measured capacity): the speed and the feedback
    learned on the old one say nothing of the new, and held it below its capacity (or above) until the slow
    feedback wore them off. The forecast's record is of the demand and stays."""
    engine = engine_of(pred)
    if state.engine == engine:
        return state
    if state.engine is None:  # a state from before the field: the engine it was learned on is unknown
        return state.model_copy(update={"engine": engine})
    return state.model_copy(
        update={
            "engine": engine,
            "correction": 1.0,
            "speed": 1.0,
            "running_expected": 0.0,
            "running_observed": 0.0,
            "speed_at": None,
        }
    )


def _clip(x: float, bound: float) -> float:
    return min(1.0 + bound, max(1.0 - bound, x))


def _speed(inp: ScalingInputs, state: ForecastState, d: Demand) -> ForecastState:
    """The forecast state with the engines' speed advanced by this tick's running requests (unchanged when
    the tick gives none)."""
    curve = inp.group.demand.in_service if inp.group.demand else []
    if not curve or not d.complete or not d.running:
        return state
    expected = sum(rate * in_service_s(curve, rate) for rate, _ in d.running)
    observed = sum(run for _, run in d.running)
    if expected < SPEED_MIN_RUNNING or observed <= 0:
        return state
    if not _steady(inp, d, curve[-1][0], observed):
        return state
    if state.speed_at is None or state.running_observed <= 0:
        exp_mean = obs_mean = expected  # the prior: the model is right, until the moving means say otherwise
    else:
        dt = min(SPEED_SAMPLE_S, max(0.0, (inp.now - state.speed_at).total_seconds()))
        a = 1.0 - math.exp(-dt / SPEED_TAU_S)
        exp_mean = state.running_expected + a * (expected - state.running_expected)
        obs_mean = state.running_observed + a * (observed - state.running_observed)
    speed = min(1.0, _clip(exp_mean / obs_mean, inp.spec.predictive.correction_bound))
    return state.model_copy(
        update={
            "running_expected": exp_mean,
            "running_observed": obs_mean,
            "speed_at": inp.now,
            "speed": speed,
        }
    )


def _steady(inp: ScalingInputs, d: Demand, capacity_rps: float, running: float) -> bool:
    """Whether Little's law reads the engines' speed this tick: within the modelled capacity, the SLO held
    and the queues short. A burst breaks all three: its requests pile up in the batch and stay there after
    the minute's rate has fallen, which reads as a slow engine on any engine."""
    if max(rate for rate, _ in d.running) > capacity_rps:
        return False
    slo = inp.spec.slo_ttft_p99_ms
    if slo is not None and (d.ttft_p99_ms is None or d.ttft_p99_ms > slo):
        return False
    return d.waiting is None or d.waiting <= QUEUED_SHARE * running


def in_service_s(curve: list[tuple[float, float]], rate: float) -> float:
    """The model's mean time in service at ``rate`` (linear between the tabulated loads, the nearest end's
    value outside them)."""
    if rate <= curve[0][0]:
        return curve[0][1]
    for (r0, w0), (r1, w1) in zip(curve, curve[1:], strict=False):
        if rate <= r1:
            return w0 + (w1 - w0) * (rate - r0) / (r1 - r0) if r1 > r0 else w1
    return curve[-1][1]


def read_demand(inp: ScalingInputs, load_s: float) -> DemandSignals | None:
    """The demand signals, advancing the forecast's record; None when predictive scaling is off. ``load_s``:
    how long a launch here takes to serve, after this tick's verdicts (``load_time_s``)."""
    pred = inp.spec.predictive
    if pred.mode == PredictiveMode.OFF:
        return None
    gh = inp.gh
    d = observed_demand(inp, load_s)
    dem = inp.group.demand
    if d.complete and dem is not None and dem.recent_rps is not None:
        d.rps = dem.recent_rps  # the last minute's mean: one scrape period's rate swings with every clump
    series = dem.history if dem else None
    horizon = inp.spec.horizon_s
    state = fc.judge(_for_engine(gh.forecast, pred), inp.now, d.rps if d.complete else None)
    share = dem.week_share if dem else None
    f = fc.forecast(
        series,
        inp.now,
        horizon,
        state,
        zone=pred.seasonal_zone,
        calendar=inp.spec.calendar,
        calendar_zone=inp.spec.calendar_zone,
        share=share,
    )
    state = fc.remember(state, inp.now, f, horizon)
    model_rps = pred.capacity_rps or (dem.capacity_rps if dem else None)
    if model_rps:
        state = _correct(inp, state, d, model_rps)
    burst = fc.burstiness(series, inp.now, cap=fc.STAFFING_MAX_BURSTINESS)
    cap = model_rps * state.correction if model_rps else None
    sig = DemandSignals(
        pred.mode, d, f, model_rps, cap, state.correction, state.speed, burst, horizon_s=horizon
    )
    if cap is not None and d.rps is not None and f.method != fc.Method.NONE:
        need_rps = max(f.upper_rps, d.rps)
        sig.target = staffing(need_rps / cap, pred.headroom, burst)
        sig.need_now = staffing(d.rps / cap, pred.headroom, burst)
        state, sig.window_target = _window(inp, state, sig.target, burst)
        sig.mean_need = staffing(max(f.peak_rps, d.rps) / cap, pred.headroom, burst)
        busiest = fc.busiest_minute(series, inp.now, _scale_in_window_s(inp, burst))
        if busiest is not None:
            sig.burst_need = staffing(busiest / cap, pred.headroom, 1.0)
    else:
        what = "capacity per instance" if cap is None else "request rate (or its recent level)"
        sig.warnings.append(
            PlanWarning(
                code=WarningCode.DEMAND_UNKNOWN,
                group=inp.group.name,
                metric=None if cap is None else m.REQUEST_RATE,
                detail=f"{what} unknown: the forecast neither scales in nor out",
            )
        )
    gh.forecast = state
    sig.inputs = _inputs(sig, gh)
    return sig


def _window(inp: ScalingInputs, state: ForecastState, target: int, burst: float) -> tuple[ForecastState, int]:
    """The state with this tick's target recorded, and the highest target of the scale-in window (warm
    headroom outlives a burst). The window is ``burst`` (at most ``MAX_BURSTINESS``) times the configured one:
    clumpy arrivals come back after longer lulls.

    The record keeps only targets that no later one equals or exceeds (a later target at least as high is
    in every window the earlier one is in), so it stays short however long the window.
    """
    keep_from = inp.now - timedelta(seconds=_scale_in_window_s(inp, fc.MAX_BURSTINESS))
    kept = [r for r in state.targets if r.at > keep_from and r.serving > target]
    kept.append(Recommendation(at=inp.now, serving=target))
    start = inp.now - timedelta(seconds=_scale_in_window_s(inp, burst))
    return state.model_copy(update={"targets": kept}), max(r.serving for r in kept if r.at > start)


def _scale_in_window_s(inp: ScalingInputs, burst: float) -> float:
    """The scale-in window: the configured one times ``burst`` (at most ``MAX_BURSTINESS``)."""
    return inp.spec.stabilization.scale_in_window_s * min(burst, fc.MAX_BURSTINESS)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _inputs(sig: DemandSignals, gh: GroupHistory) -> dict[str, Scalar]:
    """The decision's inputs (the keys the simulator's report reads are the first five)."""
    f, d = sig.forecast, sig.demand
    return {
        "demand_rps": _r(d.rps),
        "forecast_rps": _r(f.mean_rps) if f.method != fc.Method.NONE else None,
        "forecast_upper_rps": _r(f.upper_rps) if f.method != fc.Method.NONE else None,
        "capacity_per_instance_rps": _r(sig.capacity_rps),
        "predictive_target": sig.target,
        "predictive_mode": sig.mode.value,
        "forecast_method": f.method.value,
        "forecast_peak_rps": _r(f.peak_rps),
        "forecast_level_rps": _r(f.level_rps),
        "forecast_lower_rps": _r(f.lower_rps),
        "capacity_model_rps": _r(sig.capacity_model_rps),
        "capacity_correction": _r(sig.correction, 4),
        "capacity_speed": _r(sig.speed, 4),
        "burstiness": _r(sig.burstiness),
        "demand_complete": d.complete,
        "prompt_tokens": _r(d.prompt_tokens, 1),
        "output_tokens": _r(d.output_tokens, 1),
        "forecast_mape_pct": _r(fc.mape_pct(gh.forecast), 2),
        "forecast_coverage": _r(fc.coverage(gh.forecast)),
        "forecast_horizon_s": _r(sig.horizon_s, 1),
        "demand_need": sig.need_now,  # the observed demand alone, staffed: what a burst's minute needed
        "scale_in_window_target": sig.window_target,  # scale-in goes no lower (``_window``)
    }
