"""Property tests: generated specs, snapshot sequences and the histories they build prove the rules.

Each example runs ``decide`` over a short sequence of generated observations, feeding back the history, and
checks every rule at every step; so histories are generated as the service would build them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import (
    GroupSnapshot,
    GroupSpec,
    History,
    IncidentState,
    InstanceSnapshot,
    MetricSample,
    OperatorAction,
    Plan,
    PolicySpec,
    Snapshot,
    StepAction,
    SystemEvent,
    WarningCode,
    XidEvent,
    decide,
)
from policies import metrics as m
from policies.model import OPEN_STATES, PRE_ISOLATION_STATES
from policies.schedule import bounds

GROUP = "g"
BASE = datetime(2026, 12, 7, 0, 0, tzinfo=UTC)
PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

RULE_METRICS = ["queue_waiting_per_instance", "ttft_p99_ms", "gpu_util_avg", "gpu_mem_bw_util"]
STATES = ["InService"] * 6 + [
    "Pending",
    "Pending:Wait",
    "Standby",
    "Protected",
    "Removing",
    "Stopped",
    "Weird",
]


@st.composite
def schedules(draw, max_size):
    out = []
    for k in range(draw(st.integers(0, 2))):
        floor = draw(st.integers(0, max_size))
        entry = {"name": f"s{k}", "min": floor}
        if draw(st.booleans()):
            entry["days"] = draw(st.sampled_from(["mon-fri", "sat,sun", "daily", "fri-mon", "wed"]))
            entry["start"] = f"{draw(st.integers(0, 23)):02d}:{draw(st.sampled_from([0, 30])):02d}"
            entry["end"] = f"{draw(st.integers(0, 23)):02d}:{draw(st.sampled_from([0, 15])):02d}"
        else:
            entry["cron"] = draw(st.sampled_from(["0 9 * * 1-5", "30 20 * * *", "*/20 * * * *"]))
            entry["duration"] = draw(st.sampled_from(["10m", "2h", "13h"]))
        entry["timezone"] = draw(st.sampled_from(["Asia/Shanghai", "UTC", "Europe/Berlin"]))
        out.append(entry)
    return out


@st.composite
def specs(draw):
    min_size = draw(st.integers(0, 4))
    max_size = draw(st.integers(max(1, min_size), min_size + 14))
    warm = draw(st.integers(0, max_size))
    base_floor = max(min_size, warm)
    scheds = draw(schedules(max_size))
    for s in scheds:
        if draw(st.booleans()):
            s["max"] = draw(st.integers(max(base_floor, s["min"]), max_size))
    out_rules = [
        {
            "metric": metric,
            "above": draw(st.sampled_from([1, 2, 50, 80, 800])),
            "for": draw(st.sampled_from([0, 30, 60])),
        }
        for metric in draw(st.lists(st.sampled_from(RULE_METRICS), max_size=3, unique=True))
    ]
    in_rules = [
        {
            "metric": metric,
            "below": draw(st.sampled_from([0.5, 10, 400])),
            "for": draw(st.sampled_from([0, 60, 600])),
        }
        for metric in draw(st.lists(st.sampled_from(RULE_METRICS), max_size=2, unique=True))
    ]
    # A scale-in threshold above the scale-out one on the same metric is refused (flapping): keep the drawn
    # scale-in thresholds at or below it, as every valid config does.
    for rule in out_rules + in_rules:  # a share never crosses 100 %: such a rule is refused (never, always)
        if rule["metric"] in m.PERCENT_METRICS:
            key = "above" if "above" in rule else "below"
            rule[key] = min(rule[key], 95)
    above = {r["metric"]: r["above"] for r in out_rules}
    for rule in in_rules:
        rule["below"] = min(rule["below"], above.get(rule["metric"], rule["below"]))
    spec = {
        "name": GROUP,
        "min_size": min_size,
        "max_size": max_size,
        "warm_floor": warm,
        "cold_start_s": draw(st.sampled_from([0, 60, 180, 900])),
        "schedules": scheds,
        "scale_out": out_rules,
        "scale_in": in_rules,
        "stabilization": {
            "scale_in_window": draw(st.sampled_from([0, 60, 600])),
            "max_step_up": draw(st.sampled_from([1, 4, "50%", "100%"])),
            "max_step_down": draw(st.sampled_from([1, 3, "25%"])),
            "scale_in_cooldown": draw(st.sampled_from([0, 120])),
            "tolerance": draw(st.sampled_from([0, 0.1, 0.3])),
        },
        "guardrails": {
            "max_isolated": draw(st.sampled_from([None, 0, 1, 3, "20%", "50%"])),
            "breaker": {"max_isolations": draw(st.sampled_from([1, 3, "30%"])), "window": "1h"},
        },
    }
    return GroupSpec.model_validate(spec)


METRIC_VALUES = {
    m.QUEUE_WAITING: (0.0, 0.2, 1.0, 3.0, 9.0),
    m.REQUESTS_RUNNING: (0.0, 4.0),
    m.TTFT_P99_MS: (100.0, 300.0, 900.0, 3000.0),
    m.GPU_UTIL_PCT: (10.0, 60.0, 95.0),
    m.GPU_MEM_BW_UTIL_PCT: (20.0, 95.0),
    m.GPU_TEMPERATURE_C: (55.0, 84.0, 90.0),
    m.GPU_MEM_USED_PCT: (50.0, 93.0),
    m.GPU_THROTTLE_REASONS: (0.0, 4.0, 64.0),
}
# how an instance's samples look: all fresh, one metric missing, some 30 s old, all stale, none at all
FRESHNESS = ("fresh", "fresh", "fresh", "one_missing", "aged", "stale", "none")
FAULTS = (None,) * 12 + ("xid13", "xid43", "xid79", "failure", "maintenance")

# A few draws per instance keep generation cheap; the values come from the drawn profile number.
instance_tuples = st.tuples(
    st.sampled_from(STATES),
    st.sampled_from(["Healthy"] * 8 + ["Unhealthy"]),
    st.sampled_from(FRESHNESS),
    st.integers(0, 10_000),
    st.sampled_from(FAULTS),
)


def build_instance(iid, at, drawn):
    state, health, freshness, profile, fault = drawn
    metrics = {}
    for k, (name, values) in enumerate(METRIC_VALUES.items()):
        if freshness == "none" or (freshness == "one_missing" and k == profile % len(METRIC_VALUES)):
            continue
        age = {"aged": 30, "stale": 600}.get(freshness, 0)
        value = values[(profile // (k + 1)) % len(values)]
        metrics[name] = MetricSample(value=value, at=at - timedelta(seconds=age))
    xids = [XidEvent(code=int(fault[3:]), at=at)] if fault and fault.startswith("xid") else []
    events = []
    if fault == "failure":
        events = [SystemEvent(code="SystemFailure.Reboot")]
    elif fault == "maintenance":
        events = [SystemEvent(code="SystemMaintenance.Reboot")]
    return InstanceSnapshot(
        instance_id=iid,
        lifecycle_state=state,
        health_status=health,
        created_at=at - timedelta(seconds=profile * 7),
        metrics=metrics,
        xids=xids,
        events=events,
    )


@st.composite
def scenarios(draw):
    spec = draw(specs())
    start = BASE + timedelta(minutes=draw(st.integers(0, 7 * 24 * 60)))
    steps = []
    at = start
    pool = [f"i-{k:02d}" for k in range(16)]
    for k in range(draw(st.integers(1, 6))):
        at = at + timedelta(seconds=draw(st.sampled_from([1, 15, 15, 60, 600]))) if k else at
        ids = sorted(draw(st.lists(st.sampled_from(pool), max_size=12, unique=True)))
        insts = [build_instance(iid, at, draw(instance_tuples)) for iid in ids]
        ops = []
        if ids and draw(st.integers(0, 6)) == 0:
            kind = draw(st.sampled_from(["isolate", "release", "ack", "reset_breaker", "replace"]))
            ops.append(
                OperatorAction(action_id=f"op{k}", kind=kind, instance_id=draw(st.sampled_from(ids)), at=at)
            )
        desired = draw(st.one_of(st.none(), st.integers(0, spec.max_size)))
        group = GroupSnapshot(
            name=GROUP,
            desired_capacity=desired,
            instances=insts,
            operator_actions=ops,
            paused=draw(st.integers(0, 12)) == 0,
        )
        steps.append((at, Snapshot(taken_at=at, groups=[group])))
    return spec, steps


def run_all(spec, steps):
    """Yield (previous history, snapshot, at, plan) for each step of a scenario."""
    pspec = PolicySpec(groups=(spec,))
    history = None
    for at, snap in steps:
        plan = decide(snap, pspec, history, at)
        yield history, snap, at, plan
        history = plan.history


def serving_count(snap):
    return sum(1 for i in snap.groups[0].instances if i.lifecycle_state in ("InService", "Protected"))


def standby_count(snap):
    return sum(1 for i in snap.groups[0].instances if i.lifecycle_state == "Standby")


# ---- the rules ---------------------------------------------------------------------------------------------


@PROPS
@given(scenarios())
def test_never_below_the_floor_nor_above_the_ceiling_or_max(scenario):
    spec, steps = scenario
    for _, snap, at, plan in run_all(spec, steps):
        gp = plan.group(GROUP)
        b = bounds(spec, at)
        base = plan.history.groups[GROUP].last_target
        room = spec.max_size - standby_count(snap)
        if snap.groups[0].paused:
            assert gp.desired_capacity is None  # a paused group is never written, nor its target moved
            continue
        assert min(b.floor, room) <= base <= b.ceiling
        assert gp.serving_target <= b.ceiling
        assert gp.target_capacity <= max(spec.max_size, standby_count(snap))
        assert gp.serving_target >= min(b.floor, room)
        assert b.floor >= max(spec.min_size, spec.warm_floor) or b.floor == spec.max_size


@PROPS
@given(scenarios())
def test_missing_or_stale_metrics_never_scale_in(scenario):
    spec, steps = scenario
    stale_s = spec.stabilization.stale_after_s
    for before, snap, at, plan in run_all(spec, steps):
        if before is None or before.groups[GROUP].last_target is None:
            continue
        serving = [i for i in snap.groups[0].instances if i.lifecycle_state in ("InService", "Protected")]
        sources = {m.GROUP_METRICS[r.metric][0] for r in spec.scale_out + spec.scale_in}
        unknown = any(
            src not in i.metrics or i.metrics[src].at < at - timedelta(seconds=stale_s)
            for src in sources
            for i in serving
        ) or (bool(sources) and not serving)
        if not unknown:
            continue
        previous = before.groups[GROUP].last_target
        now_target = plan.history.groups[GROUP].last_target
        b = bounds(spec, at)
        assert now_target >= min(previous, b.ceiling, spec.max_size - standby_count(snap))
        codes = {w.code for w in plan.group(GROUP).warnings}
        assert codes & {WarningCode.METRIC_MISSING, WarningCode.METRIC_STALE, WarningCode.METRIC_PARTIAL}


@PROPS
@given(scenarios())
def test_no_node_leaves_service_while_that_would_break_the_floor(scenario):
    spec, steps = scenario
    for _, snap, _at, plan in run_all(spec, steps):
        gp = plan.group(GROUP)
        by_id = {i.instance_id: i for i in snap.groups[0].instances}
        leaving = [
            s
            for s in gp.steps
            if s.action == StepAction.ENTER_STANDBY
            and by_id[s.instance_id].lifecycle_state in ("InService", "Protected")
        ]
        if leaving:
            assert serving_count(snap) - len(leaving) >= gp.floor


@PROPS
@given(scenarios())
def test_never_more_isolated_than_the_guardrail(scenario):
    spec, steps = scenario
    for _before, snap, at, plan in run_all(spec, steps):
        incs = plan.history.groups[GROUP].incidents
        newly = [i for i in incs if i.admitted_at == at and i.state in OPEN_STATES]
        if not newly:
            continue
        size = sum(
            1
            for i in snap.groups[0].instances
            if i.lifecycle_state in ("InService", "Protected", "Pending", "Pending:Wait", "Standby")
        )
        limit = spec.guardrails.max_isolated_for(size)
        out = [
            i
            for i in incs
            if i.admitted_at is not None
            and i.remediated_at is None
            and i.state in OPEN_STATES
            and i.incident_id not in {n.incident_id for n in newly}
        ]
        assert len(out) + len(newly) <= limit


@PROPS
@given(scenarios())
def test_open_breaker_admits_no_automatic_isolation(scenario):
    spec, steps = scenario
    for before, snap, at, plan in run_all(spec, steps):
        if before is None or not before.groups[GROUP].breaker.open:
            continue
        if any(op.kind == "reset_breaker" for op in snap.groups[0].operator_actions):
            continue
        admitted = [i for i in plan.history.groups[GROUP].incidents if i.admitted_at == at and not i.manual]
        assert not admitted
        assert any(w.code == WarningCode.BREAKER_OPEN for w in plan.group(GROUP).warnings)


@PROPS
@given(scenarios())
def test_every_incident_has_its_deadlines_and_risk_is_flagged_before_breach(scenario):
    spec, steps = scenario
    iso = spec.isolation
    for _, _, at, plan in run_all(spec, steps):
        warned = {(w.incident_id, w.code) for w in plan.warnings}
        for inc in plan.history.groups[GROUP].incidents:
            assert inc.respond_by == inc.detected_at + timedelta(seconds=iso.respond_within_s)
            assert inc.isolate_by == inc.detected_at + timedelta(seconds=iso.isolate_within_s)
            if inc.state not in OPEN_STATES or inc.acknowledged_at is not None:
                continue
            risk_from = inc.detected_at + timedelta(seconds=iso.respond_within_s * iso.at_risk_fraction)
            if risk_from <= at <= inc.respond_by:
                assert (inc.incident_id, WarningCode.SLA_RESPOND_AT_RISK) in warned
            if at > inc.respond_by:
                assert (inc.incident_id, WarningCode.SLA_RESPOND_BREACHED) in warned


@PROPS
@given(scenarios())
def test_suspect_instances_come_first_in_the_scale_in_order(scenario):
    spec, steps = scenario
    for _, snap, _, plan in run_all(spec, steps):
        gp = plan.group(GROUP)
        states = {i.instance_id: i.lifecycle_state for i in snap.groups[0].instances}
        suspects = {
            i.instance_id
            for i in plan.history.groups[GROUP].incidents
            if i.state in OPEN_STATES
            and states.get(i.instance_id) in ("InService", "Protected", "Pending", "Pending:Wait")
        }
        assert set(gp.scale_in_order[: len(suspects)]) == suspects
        assert all(states[i] not in ("Standby", "Removing") for i in gp.scale_in_order)


@PROPS
@given(scenarios())
def test_decide_is_pure_and_its_values_round_trip_through_json(scenario):
    spec, steps = scenario
    pspec = PolicySpec(groups=(spec,))
    history = None
    for at, snap in steps:
        before = history.model_dump_json() if history is not None else None
        plan = decide(snap, pspec, history, at)
        again = decide(snap, pspec, history, at)
        assert plan == again
        if history is not None:
            assert history.model_dump_json() == before
        assert Plan.model_validate_json(plan.model_dump_json()) == plan
        assert Snapshot.model_validate_json(snap.model_dump_json()) == snap
        history = History.model_validate_json(plan.history.model_dump_json())


@PROPS
@given(scenarios())
def test_pre_isolation_incidents_are_not_in_standby_by_our_hand(scenario):
    """An incident only reaches isolated once its instance was observed in Standby."""
    spec, steps = scenario
    for _, snap, at, plan in run_all(spec, steps):
        states = {i.instance_id: i.lifecycle_state for i in snap.groups[0].instances}
        for inc in plan.history.groups[GROUP].incidents:
            if inc.isolated_at == at:
                assert states.get(inc.instance_id) == "Standby"
            if inc.state in PRE_ISOLATION_STATES:
                assert inc.isolated_at is None


# ---- targeted generators for the combination rules ---------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    n=st.integers(1, 12),
    floor=st.integers(0, 12),
    queue=st.floats(0, 20, allow_nan=False),
    ttft=st.floats(50, 5000, allow_nan=False),
    util=st.floats(0, 100, allow_nan=False),
)
def test_triggers_combine_as_max_and_the_floor_as_max_of_floor_and_desire(n, floor, queue, ttft, util):
    spec = GroupSpec.model_validate(
        {
            "name": GROUP,
            "min_size": 0,
            "max_size": 40,
            "warm_floor": 0,
            "cold_start_s": 0,
            "schedules": [{"name": "all", "days": "daily", "start": "00:00", "end": "00:00", "min": floor}],
            "scale_out": [
                {"metric": "queue_waiting_per_instance", "above": 2},
                {"metric": "ttft_p99_ms", "above": 800},
                {"metric": "gpu_util_avg", "above": 85},
            ],
            "scale_in": [{"metric": "queue_waiting_per_instance", "below": 0.1, "for": "1h"}],
            "stabilization": {"max_step_up": "10000%", "panic_threshold": 1000, "tolerance": 0},
            "isolation": {"rules": []},
        }
    )
    at = BASE
    values = {m.QUEUE_WAITING: queue, m.TTFT_P99_MS: ttft, m.GPU_UTIL_PCT: util}
    insts = [
        InstanceSnapshot(
            instance_id=f"i-{k}", metrics={k2: MetricSample(value=v, at=at) for k2, v in values.items()}
        )
        for k in range(n)
    ]
    snap = Snapshot(taken_at=at, groups=[GroupSnapshot(name=GROUP, desired_capacity=n, instances=insts)])
    plan = decide(snap, PolicySpec(groups=(spec,)), None, at)
    desires = [n]
    for value, threshold in ((queue, 2), (ttft, 800), (util, 85)):
        if value > threshold:
            desires.append(math.ceil(n * value / threshold - 1e-9))
    expected = min(40, max(floor, max(desires)))
    assert plan.group(GROUP).serving_target == expected


@settings(max_examples=300, deadline=None)
@given(in_service=st.integers(1, 10), pending=st.integers(0, 10), queue=st.floats(2.01, 3.9, allow_nan=False))
def test_pending_capacity_is_counted_so_nothing_is_ordered_twice(in_service, pending, queue):
    spec = PolicySpec(
        groups=(
            GroupSpec.model_validate(
                {
                    "name": GROUP,
                    "min_size": 0,
                    "max_size": 100,
                    "warm_floor": 0,
                    "scale_out": [{"metric": "queue_waiting_per_instance", "above": 2}],
                    "stabilization": {"max_step_up": "10000%"},
                    "isolation": {"rules": []},
                }
            ),
        )
    )

    def observe(at, desired):
        insts = [
            InstanceSnapshot(
                instance_id=f"s-{k}", metrics={m.QUEUE_WAITING: MetricSample(value=queue, at=at)}
            )
            for k in range(in_service)
        ]
        insts += [InstanceSnapshot(instance_id=f"p-{k}", lifecycle_state="Pending") for k in range(pending)]
        return Snapshot(
            taken_at=at, groups=[GroupSnapshot(name=GROUP, desired_capacity=desired, instances=insts)]
        )

    plan = decide(observe(BASE, in_service + pending), spec, None, BASE)
    need = math.ceil(in_service * queue / 2 - 1e-9)
    assert plan.group(GROUP).serving_target == max(need, in_service + pending)
    # the next tick sees the same queue while the order is still in flight: nothing more is ordered
    later = BASE + timedelta(seconds=15)
    plan2 = decide(observe(later, plan.group(GROUP).target_capacity), spec, plan.history, later)
    assert plan2.group(GROUP).serving_target == plan.group(GROUP).serving_target


def test_generated_incidents_reach_every_state_somewhere():
    """A guard on the generators: the property tests above do exercise the incident workflow."""
    seen: set[IncidentState] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(scenarios())
    def collect(scenario):
        spec, steps = scenario
        for _, _, _, plan in run_all(spec, steps):
            seen.update(i.state for i in plan.history.groups[GROUP].incidents)

    collect()
    assert {IncidentState.DETECTED, IncidentState.CAPACITY_PROTECTED, IncidentState.CLOSED} <= seen
