"""The capacity table: requests/s one instance of a group serves within its SLOs, per token mix.

The sizing engine (``sizing.capacity``, the same model ``fleet size`` uses: model, instance type, TP, vLLM
settings: ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``, the
sizing engine's defaults for those the group's ``predictive`` section leaves out) is run once per mix bucket
and cached; mixes are bucketed geometrically (``MIX_STEP``) in prompt and output tokens, so the table is
tabulated once per bucket, not once per tick, and a mean is interpolated between the four buckets around it.
A group with ``predictive.capacity_rps`` uses that measured value instead. The policy gets the value for the
observed mix in ``GroupSnapshot.demand``; the online correction of it lives in the policy
(``policies.scaling.demand``).

Beside the capacity, the table keeps per mix the engine's mean time in service (admitted to last token) at a
few loads up to that capacity (``in_service``): by Little's law an instance serving ``r`` requests/s holds
``r x`` that many running, which is what the correction compares the fleet's running requests with.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from policies import forecast as fc
from policies.model import ForecastState
from policies.schedule import bounds
from policies.spec import DEFAULT_MAX_MODEL_LEN, GroupSpec

if TYPE_CHECKING:
    from fleet.service.demand import DemandLog
    from fleet.service.schedules import LearnedFloor
    from sizing import Deployment

log = logging.getLogger(__name__)
T = TypeVar("T")

MIX_STEP = 1.15  # token-mix buckets: 15 % apart
DEFAULT_PROMPT_TOKENS = 1000.0  # before any request has been seen
DEFAULT_OUTPUT_TOKENS = 200.0
# the loads, as shares of the mix's capacity, at which the time in service is tabulated
IN_SERVICE_LOADS = (0.1, 0.25, 0.5, 0.75, 1.0)


def bucket(tokens: float) -> float:
    """The bucket centre for a mean token count."""
    k = round(math.log(max(tokens, 1.0)) / math.log(MIX_STEP))
    return float(MIX_STEP**k)


@dataclass(frozen=True)
class Capacity:
    rps: float | None
    source: str  # "measured", "sizing <model> on <type> ...", or why it is unknown
    prompt_tokens: float
    output_tokens: float


class CapacityTable:
    """Cached per-instance capacity by (group hardware, SLOs, mix bucket)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[object, ...], float] = {}
        self._curves: dict[tuple[object, ...], tuple[tuple[float, float], ...]] = {}
        # the last blend per group hardware and SLOs: the mix moves once a minute, a tick reads it again
        self._blends: dict[tuple[object, ...], tuple[float, float, tuple[tuple[float, float], ...]]] = {}

    def lookup(self, spec: GroupSpec, prompt_tokens: float | None, output_tokens: float | None) -> Capacity:
        pred = spec.predictive
        p_mean = max(1.0, prompt_tokens or DEFAULT_PROMPT_TOKENS)
        o_mean = max(1.0, output_tokens or DEFAULT_OUTPUT_TOKENS)
        if pred.capacity_rps is not None:
            return Capacity(
                pred.capacity_rps, "measured (predictive.capacity_rps)", bucket(p_mean), bucket(o_mean)
            )
        if not (pred.model and pred.instance_type):
            return Capacity(None, "no model and instance_type", bucket(p_mean), bucket(o_mean))
        # capacity falls steeply with the prompt length near the TTFT SLO, and by a tenth from one output
        # bucket to the next: interpolate (log-linear in both) between the buckets around the mean instead of
        # jumping from one bucket to the next. A mean that sits on a bucket's edge (ServeGen's outputs hover
        # around 218 tokens, the edge of 203 and 234) otherwise flips the capacity by 10 % from one minute to
        # the next, and the scale-in window holds the highest target that flicker gives.
        rps = _interpolated(lambda p, o: self._rps(spec, p, o), p_mean, o_mean)
        source = f"sizing {pred.model} on {pred.instance_type} at {p_mean:.0f}/{o_mean:.0f} tokens"
        if pred.prefix_hit:
            source += f", {pred.prefix_hit:.0%} of each prompt from the prefix cache"
        if rps <= 0:
            return Capacity(None, source + ": misses the SLO", p_mean, o_mean)
        return Capacity(rps, source, p_mean, o_mean)

    def demand_fields(
        self, spec: GroupSpec, prompt_tokens: float | None, output_tokens: float | None
    ) -> dict[str, object]:
        """The ``DemandInputs`` fields the table gives a group at a token mix: the capacity per instance,
        where it comes from, the mix it is for and the time in service along it."""
        cap = self.lookup(spec, prompt_tokens, output_tokens)
        return {
            "capacity_rps": cap.rps,
            "capacity_source": cap.source,
            "prompt_tokens": cap.prompt_tokens,
            "output_tokens": cap.output_tokens,
            "in_service": list(self.in_service(spec, cap)),
        }

    def in_service(self, spec: GroupSpec, cap: Capacity) -> tuple[tuple[float, float], ...]:
        """(requests/s per instance, mean seconds a request is in service) at ``IN_SERVICE_LOADS`` of the
        capacity ``cap`` that ``lookup`` gave; empty for a measured capacity (no engine model to compare)."""
        pred = spec.predictive
        if cap.rps is None or pred.capacity_rps is not None or not (pred.model and pred.instance_type):
            return ()
        where = self._hardware(spec)
        last = self._blends.get(where)
        if last is not None and last[:2] == (cap.prompt_tokens, cap.output_tokens):
            return last[2]
        blend = self._blend(spec, cap)
        self._blends[where] = (cap.prompt_tokens, cap.output_tokens, blend)
        return blend

    def _blend(self, spec: GroupSpec, cap: Capacity) -> tuple[tuple[float, float], ...]:
        curves = {
            (p, o): self._curve(spec, p, o)
            for p in _around(cap.prompt_tokens)[:2]
            for o in _around(cap.output_tokens)[:2]
        }
        if len({len(c) for c in curves.values()}) != 1:
            return next((c for c in curves.values() if c), ())  # a corner misses the SLO: no blend
        rows = len(next(iter(curves.values())))

        def blended(row: int, col: int) -> float:
            return _interpolated(lambda p, o: curves[(p, o)][row][col], cap.prompt_tokens, cap.output_tokens)

        return tuple((blended(row, 0), blended(row, 1)) for row in range(rows))

    def _hardware(self, spec: GroupSpec) -> tuple[object, ...]:
        """What a group's capacity depends on besides the token mix: its engine and its SLOs."""
        pred = spec.predictive
        slo = spec.slo_ttft_p99_ms
        return (
            pred.model,
            pred.instance_type,
            pred.tp,
            pred.max_model_len,
            pred.max_num_seqs,
            pred.max_num_batched_tokens,
            pred.gpu_memory_utilization,
            slo,
            pred.tpot_p99_ms,
            pred.prefix_hit,
        )

    def _key(self, spec: GroupSpec, p: float, o: float) -> tuple[object, ...]:
        return (*self._hardware(spec), p, o)

    def _rps(self, spec: GroupSpec, p: float, o: float) -> float:
        key = self._key(spec, p, o)
        if key not in self._cache:
            self._cache[key] = self._tabulate(spec, p, o)
        return self._cache[key]

    def _curve(self, spec: GroupSpec, p: float, o: float) -> tuple[tuple[float, float], ...]:
        key = self._key(spec, p, o)
        if key not in self._curves:
            rps = self._rps(spec, p, o)
            self._curves[key] = self._tabulate_curve(spec, p, o, rps) if rps > 0 else ()
        return self._curves[key]

    def _deployment(self, spec: GroupSpec) -> tuple[Deployment, int]:
        """The group's engine and how many of them one instance runs (raises ``SizingInputError``)."""
        from sizing import Deployment, find_gpu, find_instance, find_model

        pred = spec.predictive
        assert pred.model and pred.instance_type
        inst = find_instance(pred.instance_type)
        dep = Deployment(
            find_model(pred.model),
            find_gpu(inst.gpu),
            tp=pred.tp or inst.gpus,
            max_model_len=pred.max_model_len or DEFAULT_MAX_MODEL_LEN,
        )
        return dep.with_(**pred.vllm_settings), max(1, inst.gpus // (pred.tp or inst.gpus))

    def _tabulate(self, spec: GroupSpec, p: float, o: float) -> float:
        from sizing.capacity import capacity_rps

        def per_instance(dep: Deployment, engines: int, cv: float) -> float:
            pred = spec.predictive
            slo_ttft, hit = spec.slo_ttft_p99_ms, pred.prefix_hit
            return engines * capacity_rps(dep, p, o, slo_ttft, pred.tpot_p99_ms, length_cv=cv, prefix_hit=hit)

        return self._sized(spec, p, o, "capacity", per_instance, 0.0)

    def _tabulate_curve(
        self, spec: GroupSpec, p: float, o: float, rps: float
    ) -> tuple[tuple[float, float], ...]:
        from sizing.capacity import in_service_curve

        def per_instance(dep: Deployment, engines: int, cv: float) -> tuple[tuple[float, float], ...]:
            rates = [share * rps / engines for share in IN_SERVICE_LOADS]
            curve = in_service_curve(dep, p, o, rates, length_cv=cv, prefix_hit=spec.predictive.prefix_hit)
            return tuple((rate * engines, seconds) for rate, seconds in curve)

        return self._sized(spec, p, o, "time in service", per_instance, ())

    def _sized(
        self,
        spec: GroupSpec,
        p: float,
        o: float,
        what: str,
        run: Callable[[Deployment, int, float], T],
        fallback: T,
    ) -> T:
        """``run`` on the group's engine, its engines per instance and the mix's fitting prompt spread; the
        ``fallback`` (with a warning) when the sizing catalog refuses the group."""
        from sizing import SizingInputError

        try:
            dep, engines = self._deployment(spec)
            return run(dep, engines, fitting_length_cv(p, o, dep.max_model_len or DEFAULT_MAX_MODEL_LEN))
        except SizingInputError as exc:
            log.warning("%s of %s: %s", what, spec.name, exc)
            return fallback


def served_context(spec: GroupSpec) -> int | None:
    """The most tokens (prompt and output) one request of the group can hold: its ``max_model_len``, else
    the model's longest context (what vLLM allows it); None for a measured capacity (the mix does not set
    it) or a model the catalog does not know. vLLM refuses a longer request, so no instance serving the
    group can report a mean above it."""
    from sizing import SizingInputError, find_model

    pred = spec.predictive
    if pred.capacity_rps is not None or not pred.model:
        return None
    if pred.max_model_len:
        return pred.max_model_len
    try:
        return find_model(pred.model).max_position
    except SizingInputError:
        return None


def _around(prompt_tokens: float) -> tuple[float, float, float]:
    """The prompt buckets either side of a mean and the mean's place between them (0 at the lower)."""
    k = math.log(max(prompt_tokens, 1.0)) / math.log(MIX_STEP)
    return float(MIX_STEP ** math.floor(k)), float(MIX_STEP ** math.ceil(k)), k - math.floor(k)


def _interpolated(
    value: Callable[[float, float], float], prompt_tokens: float, output_tokens: float
) -> float:
    """``value`` at a (prompt, output) mean, log-linear between the four bucket corners around it."""
    lo_p, hi_p, fp = _around(prompt_tokens)
    lo_o, hi_o, fo = _around(output_tokens)
    at_lo_o = _between(value(lo_p, lo_o), value(hi_p, lo_o), fp)
    at_hi_o = _between(value(lo_p, hi_o), value(hi_p, hi_o), fp)
    return _between(at_lo_o, at_hi_o, fo)


def _between(lo: float, hi: float, frac: float) -> float:
    """Log-linear interpolation of two positive values (the smaller when either is not positive)."""
    if lo > 0 and hi > 0:
        return math.exp((1 - frac) * math.log(lo) + frac * math.log(hi))
    return min(lo, hi)


FIT_Z = 2.326  # the 99th percentile of a normal: the share of prompts the spread may push past max_model_len


def fitting_length_cv(prompt_tokens: float, output_tokens: float, max_model_len: int) -> float:
    """The spread of prompt lengths the capacity test draws around the observed mean: the sizing default
    (``DEFAULT_LENGTH_CV``), narrowed so that the lognormal's 99th percentile still fits in ``max_model_len``.

    The observed mean is of prompts that did fit (vLLM rejects longer ones, a gateway cuts them). Drawn at the
    default spread around a mean near the limit, a third of the test's prompts would be refused and the rest
    would look like a light load: on the Mooncake mix (6,900 tokens against 8,192) the test then promised 0.25
    req/s per instance where the fleet breaks its SLO at 0.1. Solves ``z s - s^2 / 2 = ln((L - o) / p)`` for
    the lognormal's sigma ``s`` (the smaller root) and returns ``sqrt(exp(s^2) - 1)``."""
    from sizing.capacity import DEFAULT_LENGTH_CV

    room = (max_model_len - output_tokens) / max(prompt_tokens, 1.0)
    if room <= 1.0:
        return 0.0
    disc = FIT_Z * FIT_Z - 2.0 * math.log(room)
    if disc <= 0:
        return DEFAULT_LENGTH_CV  # room for any spread up to the default
    sigma = FIT_Z - math.sqrt(disc)
    return min(DEFAULT_LENGTH_CV, math.sqrt(math.expm1(sigma * sigma)))


def learned_floors(
    spec: GroupSpec, demand: DemandLog, table: CapacityTable, state: ForecastState, now: datetime
) -> list[LearnedFloor] | None:
    """Per coming hour: the instances the forecast's lower quantile needs (no headroom: a floor, not a
    target), never below the schedule floor of that hour. None with under a day of history (no seasonal
    forecast: the learned tasks are left as they are)."""
    from fleet.service.schedules import LearnedFloor

    hours = fc.hourly(
        demand.series(spec.name, now),
        now,
        fc.LEARNED_HOURS,
        state,
        horizon_s=spec.horizon_s,
        zone=spec.predictive.seasonal_zone,
        calendar=spec.calendar,
        calendar_zone=spec.calendar_zone,
    )
    if not hours:
        return None
    prompt, output = demand.mix(spec.name, now)
    cap = table.lookup(spec, prompt, output).rps
    if cap is None:
        return None
    k = state.correction
    out = []
    for h in hours:
        need = math.ceil(h.lower_rps / (cap * k) - 1e-9)
        out.append(LearnedFloor(h.start, max(need, bounds(spec, h.start).floor)))
    return out
