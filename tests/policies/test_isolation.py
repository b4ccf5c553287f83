"""The isolation workflow: detection per fault class, incident states, guardrails, breaker, SLA clocks."""

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_builders import GROUP, MONDAY_10_SHANGHAI, fleet, instance, policy, snapshot
from policy_world import World

from policies import (
    GroupHistory,
    History,
    IncidentState,
    MetricSample,
    OperatorAction,
    ReasonCode,
    StepAction,
    StepOutcome,
    SystemEvent,
    WarningCode,
    XidEvent,
    decide,
)
from policies.launch_verdicts import LAUNCH_GRACE_S, load_time_s, slowest_launch
from policies.model import OPEN_STATES, LaunchRecord

T0 = MONDAY_10_SHANGHAI + timedelta(hours=14)  # 00:00 Shanghai: only the warm floor applies
COLD_S = 180  # policy_builders' cold_start_s


def drive(world, spec, seconds, history=None, tick=15):
    plans = []
    for _ in range(int(seconds // tick)):
        plan = decide(world.observe(), spec, history, world.now)
        history = plan.history
        world.apply(plan)
        plans.append(plan)
        world.advance(tick)
    return plans, history


def steps_of(plans, action):
    return [s for p in plans for s in p.group(GROUP).steps if s.action == action]


def incidents(history):
    return history.groups[GROUP].incidents


def test_overheating_node_goes_through_every_state_to_closed():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    plans, hist = drive(world, spec, 20 * 60)
    (inc,) = incidents(hist)
    states = list(dict.fromkeys(e.state for e in inc.timeline))
    assert states == [
        IncidentState.DETECTED,
        IncidentState.CAPACITY_PROTECTED,
        IncidentState.ISOLATED,
        IncidentState.REMEDIATING,
        IncidentState.REMEDIATED,
        IncidentState.CLOSED,
    ]
    # acknowledging runs beside isolating: recorded on the timeline, never waited for
    assert ReasonCode.ACKNOWLEDGED in [e.reason for e in inc.timeline]
    assert inc.outcome == "rebooted"
    assert inc.rule == "gpu_overheat"
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "reboot", "exit_standby"]


def test_detection_waits_for_the_rule_duration():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0001"].hot = True
    _, hist = drive(world, spec, 105)  # hot for 0..90 s
    assert not incidents(hist)
    _, hist = drive(world, spec, 30, history=hist)
    assert len(incidents(hist)) == 1


def test_every_incident_carries_its_sla_deadlines():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0002"].hot = True
    _, hist = drive(world, spec, 3 * 60)
    (inc,) = incidents(hist)
    assert inc.respond_by - inc.detected_at == timedelta(minutes=15)
    assert inc.isolate_by - inc.detected_at == timedelta(hours=4)


def test_replacement_is_surged_before_isolating_when_the_floor_would_break():
    spec = policy(min_size=2, warm_floor=2)
    world = World(T0, 2, cold_start_s=300)
    world.nodes["i-0001"].hot = True
    plans, hist = drive(world, spec, 4 * 60)
    assert steps_of(plans, StepAction.SURGE)
    assert not steps_of(plans, StepAction.ENTER_STANDBY)  # the replacement is still booting
    assert plans[-1].group(GROUP).serving_target == 3
    plans, hist = drive(world, spec, 5 * 60, history=hist)
    assert steps_of(plans, StepAction.ENTER_STANDBY)
    assert world.launched == 1  # exactly one replacement, never a second order for the same need


def test_floor_holds_during_isolation():
    spec = policy(min_size=2, warm_floor=2)
    world = World(T0, 2, cold_start_s=120)
    world.nodes["i-0001"].hot = True
    for _ in range(40):
        _, hist = drive(world, spec, 15, history=locals().get("hist"))
        assert len(world.serving()) >= 2


def test_guardrail_and_breaker_stop_mass_isolation():
    spec = policy(guardrails={"breaker": {"max_isolations": 3, "window": "1h"}})
    world = World(T0, 10)
    for node in world.nodes.values():
        node.hot = True
    plans, hist = drive(world, spec, 4 * 60)
    gh = hist.groups[GROUP]
    admitted = [i for i in gh.incidents if i.admitted_at is not None]
    assert len(admitted) == 2  # max(1, 20% of 10)
    assert gh.breaker.open and "limit 3" in gh.breaker.reason
    last = plans[-1].group(GROUP)
    assert any(w.code == WarningCode.BREAKER_OPEN for w in last.warnings)
    waits = {s.reason for s in last.steps if s.action == StepAction.WAIT}
    assert ReasonCode.BREAKER_OPEN in waits
    assert len({i for _, a, i in world.actions if a == "enter_standby"}) <= 2


def test_breaker_stays_open_until_a_human_resets_it():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "10m"}}, max_size=20)
    world = World(T0, 10)
    for iid in ("i-0001", "i-0002", "i-0003"):
        world.nodes[iid].hot = True
    _, hist = drive(world, spec, 4 * 60)
    assert hist.groups[GROUP].breaker.open
    _, hist = drive(world, spec, 30 * 60, history=hist)
    assert hist.groups[GROUP].breaker.open  # the window passing does not close it
    world.operator_actions = [OperatorAction(action_id="r1", kind="reset_breaker", at=world.now, by="ops")]
    _, hist = drive(world, spec, 15, history=hist)
    assert not hist.groups[GROUP].breaker.open


def _held_by_breaker(spec, world, hot):
    for iid in hot:
        world.nodes[iid].hot = True
    _, hist = drive(world, spec, 4 * 60)
    gh = hist.groups[GROUP]
    assert gh.breaker.open
    held = [i for i in gh.incidents if i.admitted_at is None]
    assert len(held) == len(hot) - 1
    return hist, held


def test_a_held_incident_whose_condition_clears_closes_as_recovered_and_a_reset_leaves_it_alone():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}}, max_size=20)
    world = World(T0, 10)
    hist, held = _held_by_breaker(spec, world, ("i-0001", "i-0002", "i-0003"))
    for inc in held:
        world.nodes[inc.instance_id].hot = False  # the fans came back: nothing was done to them
    plans, hist = drive(world, spec, 9 * 60, history=hist)
    assert all(i.open for i in incidents(hist) if i.incident_id in {h.incident_id for h in held})
    plans, hist = drive(world, spec, 2 * 60, history=hist)
    gh = hist.groups[GROUP]
    recovered = [i for i in gh.incidents if i.incident_id in {h.incident_id for h in held}]
    assert all(i.state == IncidentState.CLOSED and i.outcome == "recovered" for i in recovered)
    assert all(ReasonCode.RECOVERED in [e.reason for e in i.timeline] for i in recovered)
    assert {s.incident_id for s in steps_of(plans, StepAction.CLOSE)} >= {i.incident_id for i in recovered}
    assert gh.breaker.open  # isolation still waits for a human
    _, hist = drive(world, spec, 50 * 60, history=hist)  # past the window: a reset admits what it still holds
    world.operator_actions = [OperatorAction(action_id="r1", kind="reset_breaker", at=world.now, by="ops")]
    _, hist = drive(world, spec, 10 * 60, history=hist)
    touched = {i for _, a, i in world.actions if a == "enter_standby"}
    assert not touched & {i.instance_id for i in recovered}  # the reset took no healthy node out


def test_a_held_condition_back_within_the_clear_spell_keeps_its_incident_open():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}}, max_size=20)
    world = World(T0, 10)
    hist, held = _held_by_breaker(spec, world, ("i-0001", "i-0002"))
    (inc,) = held
    world.nodes[inc.instance_id].hot = False
    _, hist = drive(world, spec, 8 * 60, history=hist)
    world.nodes[inc.instance_id].hot = True  # back before ten clear minutes: the same fault
    _, hist = drive(world, spec, 60, history=hist)
    world.nodes[inc.instance_id].hot = False
    _, hist = drive(world, spec, 8 * 60, history=hist)
    (same,) = [i for i in incidents(hist) if i.incident_id == inc.incident_id]
    assert same.open and same.admitted_at is None  # 8 clear minutes since it came back: not yet
    assert len([i for i in incidents(hist) if i.instance_id == inc.instance_id]) == 1
    _, hist = drive(world, spec, 3 * 60, history=hist)
    (same,) = [i for i in incidents(hist) if i.incident_id == inc.incident_id]
    assert same.outcome == "recovered"


def test_a_held_silent_agent_that_reports_again_recovers_but_an_xid_does_not():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}}, max_size=20)
    world = World(T0, 10, demand=lambda at: 5.0)
    for iid in ("i-0001", "i-0002"):
        world.nodes[iid].silent = True
    _, hist = drive(world, spec, 11 * 60)  # the first is admitted, the second trips the breaker
    world.nodes["i-0003"].xids = [XidEvent(code=79, at=world.now)]
    _, hist = drive(world, spec, 60, history=hist)
    gh = hist.groups[GROUP]
    held = {i.instance_id: i for i in gh.incidents if i.admitted_at is None}
    assert gh.breaker.open and {i.rule for i in held.values()} == {"agent_silent", "xid_hardware"}
    for iid in held:
        world.nodes[iid].silent = False
        world.nodes[iid].xids = []
    _, hist = drive(world, spec, 12 * 60, history=hist)
    ids = {h.incident_id for h in held.values()}
    after = {i.instance_id: i for i in incidents(hist) if i.incident_id in ids}
    for iid, inc in after.items():
        expected = "recovered" if held[iid].rule == "agent_silent" else None
        assert inc.outcome == expected, (iid, held[iid].rule)


def test_a_held_latency_outlier_back_among_its_peers_recovers():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}}, max_size=20)
    world = World(T0, 10)
    world.nodes["i-0001"].hot = True
    world.nodes["i-0005"].ttft_ms = 2500
    _, hist = drive(world, spec, 7 * 60)
    (held,) = [i for i in incidents(hist) if i.admitted_at is None]
    assert held.rule == "latency_outlier" and hist.groups[GROUP].breaker.open
    world.nodes["i-0005"].ttft_ms = None  # as fast as the others again
    _, hist = drive(world, spec, 11 * 60, history=hist)
    (after,) = [i for i in incidents(hist) if i.incident_id == held.incident_id]
    assert after.outcome == "recovered"


def test_hardware_xid_leads_to_replacement_at_once():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0004"].xids = [XidEvent(code=79, at=T0)]
    plans, hist = drive(world, spec, 5 * 60)
    (inc,) = incidents(hist)
    assert inc.action == "replace" and inc.rule == "xid_hardware"
    assert "i-0004" in world.removed
    assert steps_of(plans, StepAction.REMOVE)[0].inputs["decrease_desired_capacity"] is True
    assert inc.state == IncidentState.CLOSED and inc.outcome == "replaced"


def test_a_node_that_serves_nothing_goes_out_at_once_while_a_live_fault_waits_for_room():
    """A group at its max_size and its floor: an overheating node cannot be spared (no room to surge a
    replacement) and holds the one max_isolated slot. A GPU lost to XID 79 (its engine died with it: vLLM
    down, no traffic) serves nothing: it needs neither the slot nor the floor, and its removal keeps the
    desired capacity, so ESS launches its replacement in its place."""
    spec = policy(min_size=4, max_size=4)
    world = World(T0, 4)
    world.nodes["i-0001"].hot = True
    _, hist = drive(world, spec, 4 * 60)
    (hot,) = incidents(hist)
    assert hot.admitted_at is not None and hot.surge_requested_at is not None and hot.isolated_at is None
    dead = world.nodes["i-0002"]
    dead.xids, dead.engine_down = [XidEvent(code=79, at=world.now)], True
    plans, hist = drive(world, spec, 6 * 60, hist)
    gone = next(i for i in incidents(hist) if i.instance_id == "i-0002")
    assert gone.outcome == "replaced" and gone.isolated_at is not None
    assert not any(e.reason == ReasonCode.GUARDRAIL_MAX_ISOLATED for e in gone.timeline)
    assert steps_of(plans, StepAction.REMOVE)[0].inputs["decrease_desired_capacity"] is False
    assert world.desired == 4 and len(world.counted()) == 4  # its replacement, in its place
    assert next(i for i in incidents(hist) if i.instance_id == "i-0001").isolated_at is None  # still waits


def test_vllm_read_down_on_busy_gpus_is_not_taken_as_serving_nothing():
    """Our agent alone reading vLLM down (a wrong vLLM address pushed to the nodes, or an engine hung on
    spinning GPUs) while CloudMonitor's own agent reads the GPUs busy: the node keeps its floor and its
    max_isolated room like any node that serves, so a fault of the agent cannot empty the fleet."""
    spec = policy(min_size=4, max_size=4)
    world = World(T0, 4)
    for node in world.nodes.values():
        node.created_at = T0 - timedelta(days=1)
    suspect = world.nodes["i-0002"]
    suspect.engine_down, suspect.gpu_util_pct = True, 95.0
    _, hist = drive(world, spec, 8 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "engine_down" and not inc.served_nothing
    assert inc.isolated_at is None and inc.surge_requested_at is not None  # the floor: a surge first
    assert suspect.state == "InService"


def test_a_dead_node_out_for_isolation_takes_no_room_from_a_live_fault():
    """max_isolated (1 here) rations serving capacity: a node whose engine died served nothing as it went
    out, so while it is rebooted an overheating node is isolated too, without waiting for the room."""
    spec = policy(guardrails={"max_isolated": 1})
    world = World(T0, 6)
    for node in world.nodes.values():  # long in service: not launches that have not served yet
        node.created_at = T0 - timedelta(days=1)
    world.nodes["i-0002"].engine_down = True
    _, hist = drive(world, spec, 5.5 * 60)
    (dead,) = incidents(hist)
    assert dead.served_nothing and dead.isolated_at is not None and dead.state != IncidentState.CLOSED
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 4 * 60, hist)
    hot = next(i for i in incidents(hist) if i.instance_id == "i-0003")
    assert hot.isolated_at is not None and not hot.served_nothing
    assert not any(e.reason == ReasonCode.GUARDRAIL_MAX_ISOLATED for e in hot.timeline)
    at = {(action, iid): when for when, action, iid in world.actions}
    # out together: the live one went into Standby while the dead one was still there
    assert at[("enter_standby", "i-0003")] < at.get(("exit_standby", "i-0002"), world.now + timedelta(1))


def test_a_live_node_rebooting_for_isolation_still_takes_its_room():
    """The other way round: a node that served when it went out takes its max_isolated room for as long as
    it is out, though its engine reads down while the reboot reloads the weights."""
    spec = policy(guardrails={"max_isolated": 1})
    world = World(T0, 6, cold_start_s=600.0)
    for node in world.nodes.values():
        node.created_at = T0 - timedelta(days=1)
    world.nodes["i-0002"].hot = True
    _, hist = drive(world, spec, 4 * 60)  # detected after 2 minutes, out, rebooted: loading for 10 minutes
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 4 * 60, hist)
    first, second = sorted(incidents(hist), key=lambda i: i.detected_at)
    assert first.isolated_at is not None and not first.served_nothing
    assert world.nodes["i-0002"].state == "Standby"  # still out, loading
    assert second.admitted_at is None
    assert any(e.reason == ReasonCode.GUARDRAIL_MAX_ISOLATED for e in second.timeline)


def drive_guarded(world, spec, seconds, history=None, max_isolated=1, tick=15):
    """``drive``, checking after every tick that the nodes out that took serving capacity (their engine ran
    as they went into Standby) never outnumber ``max_isolated``."""
    for _ in range(int(seconds // tick)):
        plan = decide(world.observe(), spec, history, world.now)
        history = plan.history
        world.apply(plan)
        assert len(world.serving_out()) <= max_isolated, (world.now, world.serving_out())
        world.advance(tick)
    return history


def _long_in_service(world):
    for node in world.nodes.values():  # not launches that have not served yet
        node.created_at = T0 - timedelta(days=1)


# an overheating node is held in Standby for a human: out, serving capacity taken, for as long as a test runs
_HOLD_HOT = [
    {"name": "engine_down", "metric": "vllm_up", "below": 0.5, "for": "2m", "action": "reboot"},
    {"name": "gpu_overheat", "metric": "gpu_temperature_c", "above": 85, "for": "2m", "action": "hold"},
]


def test_a_dead_node_that_serves_again_before_it_is_out_needs_room():
    """A node admitted as serving nothing (its vLLM crashed) needs no max_isolated room; its EnterStandby
    fails (ESS down) and its supervisor restarts the engine meanwhile. It serves again: taken out now, it
    would be a second serving node out beside the overheating one held in Standby (max_isolated 1).
    Before, it was taken out anyway, as soon as ESS answered; now it waits for room, in traffic."""
    spec = policy(guardrails={"max_isolated": 1}, isolation={"rules": _HOLD_HOT})
    world = World(T0, 6)
    _long_in_service(world)
    world.nodes["i-0003"].hot = True
    hist = drive_guarded(world, spec, 3 * 60)
    assert world.serving_out() == ["i-0003"]
    crashed = world.nodes["i-0002"]
    crashed.engine_down = True
    world.ess_down_until = world.now + timedelta(minutes=6)
    hist = drive_guarded(
        world, spec, 5.5 * 60, hist
    )  # found (the load time and 2 minutes); EnterStandby errors
    inc = next(i for i in incidents(hist) if i.instance_id == "i-0002")
    assert inc.admitted_at is not None and inc.served_nothing
    assert ("enter_standby", "i-0002") in {(a, i) for _, a, i in world.errors}
    crashed.engine_down = False  # its supervisor restarted vLLM
    hist = drive_guarded(world, spec, 4 * 60, hist)  # ESS answers again
    inc = next(i for i in incidents(hist) if i.instance_id == "i-0002")
    assert crashed.state == "InService" and inc.admitted_at is None
    assert not inc.served_nothing
    reasons = [e.reason for e in inc.timeline]
    assert ReasonCode.SERVES_AGAIN in reasons and ReasonCode.GUARDRAIL_MAX_ISOLATED in reasons


def test_a_node_held_back_whose_enter_standby_lands_late_counts_as_out():
    """Held back for room after it was asked out of traffic, a node whose EnterStandby (in flight) lands
    after all is out: it is admitted again and counts, so a further live fault waits."""
    spec = policy(guardrails={"max_isolated": 1}, isolation={"rules": _HOLD_HOT})
    world = World(T0, 6)
    _long_in_service(world)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 3 * 60)
    crashed = world.nodes["i-0002"]
    crashed.engine_down = True
    world.ess_down_until = world.now + timedelta(minutes=6)
    _, hist = drive(world, spec, 5.5 * 60, hist)
    crashed.engine_down = False
    _, hist = drive(world, spec, 30, hist)
    inc = next(i for i in incidents(hist) if i.instance_id == "i-0002")
    assert inc.admitted_at is None and inc.standby_requested_at is not None
    crashed.state = "Standby"  # the EnterStandby asked before lands now
    world.nodes["i-0004"].hot = True
    _, hist = drive(world, spec, 3 * 60, hist)
    inc = next(i for i in incidents(hist) if i.instance_id == "i-0002")
    hot = next(i for i in incidents(hist) if i.instance_id == "i-0004")
    assert inc.admitted_at is not None and inc.isolated_at is not None and not inc.took_no_capacity
    assert hot.admitted_at is None and world.nodes["i-0004"].state == "InService"


def test_a_launch_judged_dead_whose_engine_comes_up_at_admission_needs_room():
    """An incident on a launch that never served is admitted without room once its launch is judged
    failed. Its engine coming up in that very tick (slow to load, not dead) makes it a serving node: before,
    it was taken out as a dead launch, a second serving node out beside the overheating one held in Standby
    (max_isolated 1). Now it waits for room, and closes as recovered once its launch is judged served."""
    spec = policy(guardrails={"max_isolated": 1}, isolation={"rules": _HOLD_HOT})
    world = World(T0, 6)
    _long_in_service(world)
    launch = world.nodes["i-0001"]
    launch.created_at, launch.engine_down = T0, True  # launched now, its engine not up
    world.nodes["i-0003"].hot = True  # out, held, from ~2 minutes
    hist = None
    for _ in range(12 * 4):  # found at 5 minutes, its verdict (failed) due at 8
        records = hist.groups[GROUP].launches if hist is not None else []
        if any(r.instance_id == "i-0001" and not r.served for r in records):
            launch.engine_down = False  # it comes up in the tick after its failed verdict
        hist = drive_guarded(world, spec, 15, hist)
    assert not launch.engine_down  # the failed verdict came
    inc = next(i for i in incidents(hist) if i.instance_id == "i-0001")
    reasons = [e.reason for e in inc.timeline]
    assert ReasonCode.UNSERVED_LAUNCH in reasons and ReasonCode.GUARDRAIL_MAX_ISOLATED in reasons
    assert inc.outcome == "recovered" and inc.isolated_at is None
    assert launch.state == "InService" and world.serving_out() == ["i-0003"]


def test_a_dead_node_out_whose_engine_runs_again_counts():
    """A dead node held in Standby for a human takes no room; once its engine runs again there (its
    supervisor restarted it), it is serving capacity held out, and a live fault waits for room."""
    rules = [
        {"name": "engine_down", "metric": "vllm_up", "below": 0.5, "for": "2m", "action": "hold"},
        {"name": "gpu_overheat", "metric": "gpu_temperature_c", "above": 85, "for": "2m", "action": "reboot"},
    ]
    spec = policy(guardrails={"max_isolated": 1}, isolation={"rules": rules})
    world = World(T0, 6)
    _long_in_service(world)
    world.nodes["i-0002"].engine_down = True
    _, hist = drive(world, spec, 5.5 * 60)  # found after the load time and 2 minutes
    (dead,) = incidents(hist)
    assert dead.served_nothing and world.nodes["i-0002"].state == "Standby"
    world.nodes["i-0002"].engine_down = False
    _, hist = drive(world, spec, 30, hist)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 4 * 60, hist)
    dead, hot = sorted(incidents(hist), key=lambda i: i.detected_at)
    assert not dead.served_nothing and any(e.reason == ReasonCode.SERVES_AGAIN for e in dead.timeline)
    assert hot.admitted_at is None and world.nodes["i-0003"].state == "InService"
    assert any(e.reason == ReasonCode.GUARDRAIL_MAX_ISOLATED for e in hot.timeline)


_NODES = [f"i-{n:04d}" for n in range(1, 7)]
# What befalls a node, from a tick for some ticks (15 s each): its engine crashes until its supervisor
# restarts it (an engine_down incident is found 20 ticks in: the load time and 2 minutes), a GPU overheats,
# its agent dies; and ESS stops answering for a while (an EnterStandby errors, and is asked again).
_CHAOS = st.lists(
    st.tuples(
        st.sampled_from(["crash", "crash", "hot", "silent"]),
        st.sampled_from(_NODES),
        st.integers(0, 30),
        st.sampled_from([4, 20, 21, 22, 24, 30, 200]),
    ),
    max_size=6,
)
_ESS_DOWN = st.lists(st.tuples(st.integers(0, 48), st.sampled_from([4, 8, 16])), max_size=2)


@settings(max_examples=40, deadline=None)
@given(
    chaos=_CHAOS,
    ess_down=_ESS_DOWN,
    # launches loading when the run starts, until then (s): judged failed at 480 s, up a tick later, or never
    young=st.dictionaries(st.sampled_from(_NODES), st.sampled_from([120.0, 495.0, 900.0]), max_size=2),
    max_isolated=st.sampled_from([0, 1, 2]),
    hold=st.booleans(),
)
def test_serving_nodes_out_never_outnumber_max_isolated(chaos, ess_down, young, max_isolated, hold):
    """Whatever the order in which engines die and come back around the isolation's ticks, the nodes out of
    traffic that took serving capacity with them (their engine ran as they went into Standby) never
    outnumber ``max_isolated``: a node admitted as serving nothing, or as a launch that never served, that
    serves by the time it is taken out needs room like any other."""
    guardrails = {"max_isolated": max_isolated, "breaker": {"max_isolations": 20, "window": "1h"}}
    spec = policy(guardrails=guardrails, **({"isolation": {"rules": _HOLD_HOT}} if hold else {}))
    world = World(T0, 6)
    _long_in_service(world)
    for iid, load_s in young.items():
        world.nodes[iid].created_at, world.nodes[iid].loads_until = T0, T0 + timedelta(seconds=load_s)
    hist = None
    for k in range(64):
        for what, iid, start, ticks in chaos:
            node = world.nodes[iid]
            if what == "crash" and k in (start, start + ticks):
                node.engine_down = k == start
            elif what == "hot" and k == start:
                node.hot = True
            elif what == "silent" and k == start:
                node.silent = True
        for start, ticks in ess_down:
            if k == start:
                world.ess_down_until = world.now + timedelta(seconds=15 * ticks)
        hist = drive_guarded(world, spec, 15, hist, max_isolated=max_isolated)


def test_a_dead_engine_on_healthy_gpus_is_rebooted_and_returns():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0004"].engine_down = True
    plans, hist = drive(world, spec, 15 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "engine_down" and inc.instance_id == "i-0004" and inc.outcome == "rebooted"
    assert [a for _, a, i in world.actions if i == "i-0004"] == ["enter_standby", "reboot", "exit_standby"]
    detected = next(e.at for e in inc.timeline if e.state == IncidentState.DETECTED)
    # the rule's two minutes beyond a load's time (the group's cold start, 180 s), then the next tick
    assert 300 <= (detected - T0).total_seconds() <= 315
    # the health check waited for the engine to serve again, not only for the GPUs to report
    at = {a: when for when, a, i in world.actions if i == "i-0004"}
    assert (at["exit_standby"] - at["reboot"]).total_seconds() >= 180
    # nothing can finish on a dead engine, so its drain does not wait out the drain timeout
    assert (at["reboot"] - at["enter_standby"]).total_seconds() <= 30


def _crash_and_restart(world, spec, node, crashes, up_s=12 * 60, down_s=3 * 60, history=None):
    """vLLM on ``node`` serves for ``up_s``, then dies and its supervisor has it serving again ``down_s``
    later (shorter than engine_down waits), ``crashes`` times."""
    plans = []
    for _ in range(crashes):
        more, history = drive(world, spec, up_s, history=history)
        plans += more
        node.engine_down = True
        more, history = drive(world, spec, down_s, history=history)
        plans += more
        node.engine_down = False
    return plans, history


def test_an_engine_that_keeps_restarting_is_rebooted():
    spec = policy()
    world = World(T0, 6, demand=lambda at: 5.0)  # busy enough that no scale-in takes the node away
    node = world.nodes["i-0004"]
    _, hist = _crash_and_restart(world, spec, node, crashes=2)
    assert not incidents(hist)  # two restarts in the hour: tolerated
    _, hist = _crash_and_restart(world, spec, node, crashes=1, history=hist)
    (inc,) = incidents(hist)
    assert inc.rule == "engine_restarting" and inc.instance_id == "i-0004" and inc.action == "reboot"
    assert inc.evidence["episodes"] == 3
    detected = next(e.at for e in inc.timeline if e.state == IncidentState.DETECTED)
    third_crash = T0 + timedelta(minutes=12 + 15 + 15)
    assert timedelta(seconds=30) <= detected - third_crash <= timedelta(seconds=60)


def test_restarts_spread_beyond_the_window_and_a_nodes_own_reboots_are_not_a_crash_loop():
    spec = policy()
    world = World(T0, 6, cold_start_s=240, demand=lambda at: 5.0)
    node = world.nodes["i-0004"]
    # a crash every half hour: never three within the hour's window
    _, hist = _crash_and_restart(world, spec, node, crashes=4, up_s=27 * 60)
    assert not incidents(hist)
    assert len(hist.groups[GROUP].episodes) == 4
    # a node rebooted by its own incident reloads (vllm_up 0 for the cold start): not an episode
    world.nodes["i-0002"].hot = True
    _, hist = drive(world, spec, 20 * 60, history=hist)
    (inc,) = incidents(hist)
    assert inc.rule == "gpu_overheat" and inc.outcome == "rebooted"
    episodes = hist.groups[GROUP].episodes
    assert {e.instance_id for e in episodes} == {"i-0004"} and len(episodes) == 4


def test_a_node_whose_agent_went_silent_is_rebooted_and_returns_once_it_reports():
    spec = policy()
    world = World(T0, 6, demand=lambda at: 5.0)
    world.nodes["i-0004"].silent = True
    # 10 minutes to detect, the drain's timeout (nothing tells when a silent node's requests are done), the
    # reboot and the weights' load
    plans, hist = drive(world, spec, 30 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "agent_silent" and inc.instance_id == "i-0004" and inc.outcome == "rebooted"
    detected = next(e.at for e in inc.timeline if e.state == IncidentState.DETECTED)
    assert 600 <= (detected - T0).total_seconds() <= 630  # absent_for 10m, from the first silent tick
    assert [a for _, a, i in world.actions if i == "i-0004"] == ["enter_standby", "reboot", "exit_standby"]


def test_silence_everywhere_is_unknown_not_a_silent_agent():
    spec = policy()
    world = World(T0, 6, demand=lambda at: 5.0)
    world.outage = (T0 + timedelta(minutes=1), T0 + timedelta(minutes=25))  # no metrics from anyone
    world.nodes["i-0004"].silent = True  # and this one stays silent after it
    plans, hist = drive(world, spec, 30 * 60)
    assert not incidents(hist)  # 5 minutes of its own silence since the others came back
    plans, hist = drive(world, spec, 6 * 60, history=hist)
    (inc,) = incidents(hist)
    assert inc.rule == "agent_silent" and inc.instance_id == "i-0004"


def test_an_engine_still_loading_its_weights_is_not_a_dead_one():
    # ESS counts a new instance InService once ECS runs it; vLLM is down until the weights are loaded, and the
    # agent says so (vllm_up 0) for up to the group's cold start. That is no fault.
    spec = policy(cold_start_s=600)
    world = World(T0, 4)
    young = world._launch(ready=True)
    young.created_at = world.now
    young.engine_down = True
    _, hist = drive(world, spec, 660)
    assert not incidents(hist)
    _, hist = drive(world, spec, 120, history=hist)  # down past a load and two minutes: now it is one
    (inc,) = incidents(hist)
    assert inc.rule == "engine_down" and inc.instance_id == young.instance_id


def test_a_node_rebooted_for_one_fault_is_not_rebooted_again_while_its_engine_loads():
    # After the reboot the GPUs report within a minute and vLLM serves only once the weights are loaded (here
    # ten minutes): the health check waits for the engine, and the engine rule does not take the load for a
    # dead engine. One reboot, back in traffic once it serves.
    spec = policy(cold_start_s=600)
    world = World(T0, 6, cold_start_s=600)
    world.nodes["i-0003"].hot = True
    plans, hist = drive(world, spec, 40 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "gpu_overheat" and inc.outcome == "rebooted"
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "reboot", "exit_standby"]
    at = {a: when for when, a, i in world.actions if i == "i-0003"}
    assert (at["exit_standby"] - at["reboot"]).total_seconds() >= 600


def test_dead_launches_neither_trip_the_breaker_nor_hold_a_real_fault_behind_them():
    # A broken image: every launch runs and never serves. Their engine_down incidents take no serving
    # capacity out, so the breaker (limit 1) does not count them; while launches keep failing they are not
    # rebooted or replaced (a replacement would be launched the same way) but removed: they serve nothing. A
    # GPU overheating on a serving node is still isolated.
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}}, max_size=20)
    world = World(T0, 6, demand=lambda at: 8.0)  # short of capacity: the rules scale out onto broken launches
    world.broken_launches = True
    plans, hist = drive(world, spec, 35 * 60)
    gh = hist.groups[GROUP]
    dead = [i for i in gh.incidents if i.rule == "engine_down"]
    assert len(dead) >= 2 and all(i.unserved for i in dead)  # more than the breaker's limit
    assert {i.instance_id for i in dead} <= {n.instance_id for n in world.nodes.values() if n.never_serves}
    assert not gh.breaker.open
    assert all(i.admitted_at is None for i in dead)
    gone = [i for i in dead if i.outcome == "instance_gone"]
    assert len(gone) == len(dead) - 1  # all but the newest, kept to tell a slow load from a dead one
    assert {i.instance_id for i in gone} <= set(world.removed)
    assert not any(a == "enter_standby" for _, a, _ in world.actions)
    assert len(world.serving()) == 7  # the live fleet kept, and the newest dead launch
    world.nodes["i-0001"].hot = True
    _, hist = drive(world, spec, 5 * 60, history=hist)
    assert [a for _, a, i in world.actions if i == "i-0001"][:2] == ["enter_standby", "reboot"]
    assert not hist.groups[GROUP].breaker.open


def test_a_dead_launch_out_for_replacement_takes_no_room_from_a_real_fault():
    # One dead launch is a bad host: it is taken out and replaced. It never served, so it does not fill
    # max_isolated (1 in a group of 7): a serving node overheating meanwhile is taken out beside it.
    spec = policy(max_size=20)
    world = World(T0, 6)
    world.broken_launches = True
    world.desired += 1
    plans, hist = drive(world, spec, 15)
    world.broken_launches = False
    plans, hist = drive(world, spec, 10 * 60, history=hist)
    (dead,) = incidents(hist)
    assert dead.unserved and dead.admitted_at is not None
    assert world.nodes[dead.instance_id].state == "Standby"
    world.nodes["i-0001"].hot = True
    plans, hist = drive(world, spec, 3 * 60, history=hist)
    assert world.nodes[dead.instance_id].state == "Standby" and world.nodes["i-0001"].state == "Standby"
    assert not any(s.reason == ReasonCode.GUARDRAIL_MAX_ISOLATED for s in steps_of(plans, StepAction.WAIT))


def test_launches_slower_than_the_cold_start_are_waited_for_not_rebooted():
    # Every launch loads 15 minutes past the cold start (a slow model store; cold_start_s set too short). The
    # first reads as dead and, with nothing known yet, is rebooted as a bad host; once a launch judged failed
    # serves after all, the others' engine_down incidents wait for them to load and close as recovered when
    # they serve, and the group is warned that cold_start_s is too short.
    spec = policy(max_size=20)
    world = World(T0, 6, demand=lambda at: 8.0)  # short of capacity: the rules scale out
    world.slow_launch_s = 15 * 60
    plans, hist = drive(world, spec, 60 * 60)
    gh = hist.groups[GROUP]
    slow = [i for i in gh.incidents if i.rule == "engine_down"]
    assert slow and all(i.unserved for i in slow)
    assert any(r.late_at is not None for r in gh.launches)
    recovered = [i for i in slow if i.outcome == "recovered"]
    assert len(recovered) >= 2
    assert all(i.admitted_at is None for i in recovered)
    rebooted = {i for _, a, i in world.actions if a == "reboot"}
    assert len(rebooted) <= 1 and not rebooted & {i.instance_id for i in recovered}
    warned = [w for p in plans for w in p.group(GROUP).warnings if w.code == WarningCode.COLD_START_EXCEEDED]
    assert warned and "raise cold_start_s" in warned[-1].detail


def _served_late(served_at, after=timedelta(minutes=30)):
    """A launch judged failed (15 minutes after it was ordered) that served at ``served_at``, ``after`` its
    order: launches here are slower than cold_start_s."""
    ordered = served_at - after
    return LaunchRecord(
        instance_id="i-0900",
        launched_at=ordered,
        served=True,
        judged_at=ordered + timedelta(minutes=15),
        late_at=served_at,
    )


@pytest.mark.parametrize("late_ago", [timedelta(minutes=10), timedelta(hours=5)])
def test_once_a_launch_served_late_a_lone_slow_launch_is_waited_for_not_rebooted(late_ago):
    # A launch judged failed served after 30 minutes (launches here are slow), ten minutes or five hours ago;
    # the one launched now loads 12 minutes past the cold start. On its own it would read as a dead launch on
    # a bad host and be rebooted; the group's launches are now waited for as long as they took, so it is
    # judged served and its engine, still loading, is never an incident.
    spec = policy(max_size=20, min_size=7, warm_floor=7)
    world = World(T0, 6)
    world.slow_launch_s = 12 * 60
    hist = History(groups={GROUP: GroupHistory(last_target=7, launches=[_served_late(T0 - late_ago)])})
    plans, hist = drive(world, spec, 30 * 60, history=hist)
    assert not [i for i in incidents(hist) if i.rule == "engine_down"]
    assert not any(a in ("enter_standby", "reboot") for _, a, _ in world.actions)
    (young,) = [r for r in hist.groups[GROUP].launches if r.instance_id != "i-0900"]
    assert young.served and young.late_at is None and young.load_s > COLD_S + LAUNCH_GRACE_S
    assert young.shows_slow  # served past the cold start under the learned load: it keeps it learned
    warned = [w for p in plans for w in p.group(GROUP).warnings if w.code == WarningCode.COLD_START_EXCEEDED]
    assert warned and "launches are waited for 1800s" in warned[-1].detail  # until cold_start_s is raised


def test_after_a_reboot_the_health_check_waits_for_a_load_as_slow_as_launches_were_seen_to_take():
    # Engines here take 20 minutes to load (a launch served after 30, past its failed verdict), where
    # cold_start_s says 3: an overheating node rebooted loads for 20 minutes, and the health check waits for
    # it rather than replacing it at the cold start plus the margin (8 minutes).
    spec = policy(max_size=20)
    world = World(T0, 6, cold_start_s=20 * 60)
    late = _served_late(T0 - timedelta(hours=1, minutes=30))
    hist = History(groups={GROUP: GroupHistory(last_target=6, launches=[late])})
    world.nodes["i-0001"].hot = True
    _, hist = drive(world, spec, 40 * 60, history=hist)
    (inc,) = incidents(hist)
    assert [a for _, a, i in world.actions if i == "i-0001"] == ["enter_standby", "reboot", "exit_standby"]
    assert inc.action == "reboot" and "i-0001" not in world.removed  # not replaced


def test_a_dead_engine_on_a_node_that_served_waits_the_cold_start_not_the_launches_slow_load():
    # Launches here were seen to take 30 minutes (a slow model store); an engine that dies on a node that
    # has served reloads from the node's own disk, so engine_down still waits the cold start, not 30 minutes.
    spec = policy()
    world = World(T0, 6)
    hist = History(
        groups={GROUP: GroupHistory(last_target=6, launches=[_served_late(T0 - timedelta(hours=1))])}
    )
    world.nodes["i-0004"].engine_down = True
    _, hist = drive(world, spec, 10 * 60, history=hist)
    (inc,) = incidents(hist)
    detected = next(e.at for e in inc.timeline if e.state == IncidentState.DETECTED)
    assert inc.rule == "engine_down" and 300 <= (detected - T0).total_seconds() <= 315


def test_launches_fast_again_are_judged_by_the_cold_start_again():
    # Three launches served within the cold start after a slow one: what launches take here is learned
    # from the last few that served, and a slow model store that recovered no longer delays the verdicts.
    slow = _served_late(T0 - timedelta(hours=2, minutes=30))
    fast = [
        LaunchRecord(
            instance_id=f"i-09{k}",
            launched_at=T0 - timedelta(hours=2 - k * 0.5),
            served=True,
            judged_at=T0 - timedelta(hours=2 - k * 0.5) + timedelta(seconds=COLD_S + 30),
        )
        for k in range(1, 4)
    ]
    assert load_time_s([slow, *fast[:2]], COLD_S) == 1800.0
    assert load_time_s([slow, *fast], COLD_S) == COLD_S
    assert slowest_launch([slow, *fast], COLD_S) is None


def test_a_gpu_fault_found_while_a_launch_loads_is_isolated_once_it_serves_not_closed():
    # A new instance's GPU overheats while its engine still loads: found on a launch that has not served, the
    # incident waits; once the launch serves it is a fault of serving capacity like any other, isolated and
    # rebooted (only the engine's own health incidents close when a slow launch serves).
    spec = policy(max_size=20, min_size=7, warm_floor=7)
    world = World(T0, 6)
    world.slow_launch_s = 4 * 60
    _, hist = drive(world, spec, 15)
    (young,) = [n for n in world.nodes.values() if n.loads_until is not None]
    young.hot = True
    _, hist = drive(world, spec, 20 * 60, history=hist)
    (inc,) = [i for i in incidents(hist) if i.instance_id == young.instance_id]
    assert inc.rule == "gpu_overheat" and not inc.unserved and inc.outcome != "recovered"
    assert ReasonCode.UNSERVED_LAUNCH in [e.reason for e in inc.timeline]  # it was found unserved
    assert [a for _, a, i in world.actions if i == young.instance_id][:2] == ["enter_standby", "reboot"]


def test_application_xid_once_is_tolerated():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0004"].xids = [XidEvent(code=13, at=T0)]
    _, hist = drive(world, spec, 5 * 60)
    assert not incidents(hist)


def test_application_xids_never_isolate_a_node_under_the_default_rules():
    # NVIDIA's action for 13 / 31 / 43 is to restart the application, for 45 to ignore it: a workload that
    # faults again and again is a bug a reboot does not fix (a crash-looping engine is engine_restarting's).
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0004"].xids = [
        XidEvent(code=code, at=T0 + timedelta(minutes=k)) for k, code in enumerate([13, 31, 43, 45] * 3)
    ]
    _, hist = drive(world, spec, 15 * 60)
    assert not incidents(hist)


def test_a_reset_class_xid_reboots_at_once():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0004"].xids = [XidEvent(code=119, at=T0)]  # GSP RPC timeout: NVIDIA says reset the GPU
    _, hist = drive(world, spec, 3 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "xid_reset" and inc.action == "reboot"


def test_an_explicit_application_xid_rule_reboots_when_repeated_in_the_window():
    spec = policy(
        isolation={"rules": [{"name": "xid_application", "xids": [43], "repeat": 3, "window": "10m"}]}
    )
    world = World(T0, 6)
    world.nodes["i-0004"].xids = [XidEvent(code=43, at=T0 + timedelta(minutes=3 * k)) for k in range(3)]
    _, hist = drive(world, spec, 8 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "xid_application" and inc.action == "reboot"


def test_a_sticky_last_xid_reported_every_sample_is_one_occurrence():
    spec = policy()
    hist = None
    for k in range(20):  # the same XID 13 reported as "last XID" every 15 s for 5 minutes
        at = T0 + timedelta(seconds=15 * k)
        insts = fleet(at, 5) + [instance(9, at, metrics={"gpu_xid": 13})]
        plan = decide(snapshot(at, insts), spec, hist, at)
        hist = plan.history
    assert not plan.group(GROUP).incidents
    assert len(hist.groups[GROUP].xids) == 1


REPLAYED_AT = T0 + timedelta(minutes=10)


def _xid_79_replayed(operator_actions=()):
    """15 minutes of 15 s ticks: instance i-009 reports XID 79 at T0 and again at REPLAYED_AT; its remedy is
    asked, never carried out here. Returns the group history."""
    spec = policy()
    hist = None
    for k in range(61):
        at = T0 + timedelta(seconds=15 * k)
        lost = instance(9, at)
        for xid_at in (T0, REPLAYED_AT):
            if timedelta(0) <= at - xid_at <= timedelta(minutes=2):  # the agent's point, while CMS reads it
                lost.metrics["gpu_xid"] = MetricSample(value=79.0, at=xid_at)
        done = [op for op in operator_actions if op.at <= at]
        plan = decide(snapshot(at, fleet(at, 5) + [lost], operator_actions=done), spec, hist, at)
        hist = plan.history
    return hist.groups[GROUP]


def test_an_xid_79_replayed_by_a_restarted_agent_joins_the_instances_open_incident():
    """A node agent that kept no state (no state directory: docs/agent.md) reads a GPU still off the bus as a
    new XID 79 when it restarts (NVML's GPU_IS_LOST, or its kernel log's lookback replaying the line). The
    service records it as a second occurrence, but the instance's incident is still open: one incident, its
    action unchanged, nothing counted twice by the breaker."""
    gh = _xid_79_replayed()
    assert [x.at for x in gh.xids] == [T0, REPLAYED_AT]  # the replay is a second occurrence...
    (inc,) = gh.incidents  # ...that opens no second incident
    assert (inc.rule, inc.action, inc.detected_at) == ("xid_hardware", "replace", T0)
    assert inc.state in OPEN_STATES and ReasonCode.ESCALATED not in [e.reason for e in inc.timeline]


def test_an_xid_79_replayed_after_an_operator_released_the_incident_opens_another():
    """The service cannot tell a replayed XID 79 from a new fall: once an operator released the instance's
    incident, the replay opens a new one. Hence the agent keeps the falls it counted across its restarts."""
    release = OperatorAction(
        action_id="r-1", kind="release", at=T0 + timedelta(minutes=3), instance_id="i-009"
    )
    gh = _xid_79_replayed([release])
    assert [(i.detected_at, i.outcome) for i in gh.incidents] == [(T0, "released"), (REPLAYED_AT, None)]


def test_application_xids_spread_beyond_the_window_are_tolerated():
    spec = policy()
    at = T0 + timedelta(hours=1)
    xids = [XidEvent(code=43, at=at - timedelta(minutes=k * 11)) for k in range(3)]
    plan = decide(snapshot(at, fleet(at, 5) + [instance(9, at, xids=xids)]), spec, None, at)
    assert not plan.group(GROUP).incidents


def test_ecs_system_failure_event_leads_to_replacement():
    spec = policy()
    at = T0
    inst = instance(9, at, events=[SystemEvent(code="SystemFailure.Reboot", cycle_status="Executing")])
    plan = decide(snapshot(at, fleet(at, 5) + [inst]), spec, None, at)
    (inc,) = plan.group(GROUP).incidents
    assert (inc.instance_id, inc.action) == ("i-009", "replace")


@pytest.mark.parametrize(
    ("code", "outcome"),
    [("SystemMaintenance.Reboot", "rebooted"), ("SystemMaintenance.Redeploy", "replaced")],
)
def test_a_maintenance_event_a_reboot_does_not_end_is_answered_by_a_replacement_not_a_reboot(code, outcome):
    spec = policy()  # the default rules: ecs_maintenance reboots on SystemMaintenance.*
    world = World(T0, 6)
    world.nodes["i-0003"].events = [{"code": code, "cycle_status": "Scheduled"}]
    plans, hist = drive(world, spec, 30 * 60)
    (inc,) = incidents(hist)
    assert (inc.rule, inc.outcome) == ("ecs_maintenance", outcome)
    rebooted = [iid for _, action, iid in world.actions if action == "reboot"]
    assert rebooted == ([] if outcome == "replaced" else ["i-0003"])
    # the replacement is ordered within minutes, not after a reboot's health check timed out
    assert not any(e.reason == ReasonCode.HEALTH_CHECK_TIMEOUT for e in inc.timeline)
    assert (inc.closed_at - inc.detected_at) < timedelta(minutes=spec.groups[0].cold_start_s / 60 + 5)


def _maintenance(node, not_before, event_id="e-1", code="SystemMaintenance.Reboot"):
    node.events = [
        {"code": code, "cycle_status": "Scheduled", "event_id": event_id, "not_before": not_before}
    ]


def test_a_maintenance_event_weeks_ahead_is_recorded_at_once_and_isolated_only_as_its_window_nears():
    """ECS announces maintenance (here 14 days ahead): the node was taken out and rebooted at once, two
    weeks of capacity lost for nothing. Now the incident opens and is notified at once (the respond clock),
    and the isolation starts isolate_within before NotBefore, so that it is done before ECS acts."""
    spec = policy(min_size=6)  # the node stays in the group for the two weeks (no scale-in takes it)
    world = World(T0, 6)
    not_before = T0 + timedelta(days=14)
    _maintenance(world.nodes["i-0003"], not_before)
    plans, hist = drive(world, spec, 30 * 60)
    (inc,) = incidents(hist)
    assert inc.state == IncidentState.ACKNOWLEDGED and inc.acknowledged_by == "dingtalk"
    assert world.actions == [] and inc.admitted_at is None
    isolate_within = timedelta(seconds=spec.groups[0].isolation.isolate_within_s)
    assert inc.isolate_by == not_before and inc.due_at == not_before - isolate_within
    assert steps_of(plans[-1:], StepAction.WAIT)[0].reason == ReasonCode.EVENT_SCHEDULED
    warned = {w.code for p in plans for w in p.warnings}
    assert not warned & {WarningCode.SLA_ISOLATE_AT_RISK, WarningCode.SLA_ISOLATE_BREACHED}
    # half an hour before the isolation is due, nothing yet; then out of traffic, rebooted and back in time
    world.advance((inc.due_at - world.now - timedelta(minutes=30)).total_seconds())
    plans, hist = drive(world, spec, 60 * 60, hist)
    (inc,) = incidents(hist)
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "reboot", "exit_standby"]
    assert world.actions[0][0] >= inc.due_at
    assert inc.outcome == "rebooted" and inc.isolated_at <= inc.isolate_by < not_before + timedelta(seconds=1)
    assert inc.closed_at < not_before
    assert not {w.code for p in plans for w in p.warnings} & {WarningCode.SLA_ISOLATE_BREACHED}


def test_maintenance_announced_for_many_nodes_neither_trips_the_breaker_nor_waits_a_fault_behind_it():
    spec = policy(min_size=8)
    world = World(T0, 8)
    for iid in ("i-0001", "i-0002", "i-0004", "i-0005", "i-0006"):
        _maintenance(world.nodes[iid], T0 + timedelta(days=3), event_id=f"e-{iid}")
    plans, hist = drive(world, spec, 10 * 60)
    assert not hist.groups[GROUP].breaker.open and world.actions == []
    # the deferred node overheats: that fault does not wait for the event's window
    world.nodes["i-0001"].hot = True
    plans, hist = drive(world, spec, 10 * 60, hist)
    (inc,) = [i for i in incidents(hist) if i.instance_id == "i-0001"]
    assert inc.isolated_at is not None and inc.isolate_from > inc.detected_at
    assert ReasonCode.EVENT_SCHEDULED in [e.reason for e in inc.timeline]
    assert [i for _, a, i in world.actions if a == "enter_standby"] == ["i-0001"]


def test_a_scheduled_event_ecs_cancels_closes_its_incident_and_the_node_is_left_alone():
    """The incident stayed open for good (scale-in and the SLA report counted it) and, at its due time,
    the node was taken out and rebooted for maintenance ECS no longer planned."""
    spec = policy(min_size=6)
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(days=14))
    _, hist = drive(world, spec, 10 * 60)
    world.nodes["i-0003"].events = []  # Canceled: no longer among the instance's active events
    _, hist = drive(world, spec, 2 * 60, hist)
    (inc,) = incidents(hist)
    assert inc.state == IncidentState.CLOSED and inc.outcome == "event_ended"
    assert inc.timeline[-2].reason == ReasonCode.EVENT_ENDED and "e-1" in inc.timeline[-2].detail
    assert world.actions == []


def test_a_node_isolated_for_a_scheduled_event_ecs_cancels_is_returned_to_service_not_rebooted():
    spec = policy()
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(hours=2))  # within isolate_within: out at once
    hist = None
    for _ in range(20):
        _, hist = drive(world, spec, 15, hist)
        (inc,) = incidents(hist)
        if inc.state == IncidentState.ISOLATED:
            break
    assert inc.state == IncidentState.ISOLATED
    world.nodes["i-0003"].events = []
    _, hist = drive(world, spec, 3 * 60, hist)
    (inc,) = incidents(hist)
    assert inc.outcome == "released" and ReasonCode.EVENT_ENDED in [e.reason for e in inc.timeline]
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "exit_standby"]


def test_an_event_missing_because_ecs_was_unreadable_closes_nothing():
    spec = policy(min_size=6)
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(days=14))
    _, hist = drive(world, spec, 60)
    at = world.now
    snap = world.observe()
    blank = snap.groups[0].model_copy(update={"events_unread": True})
    for inst in blank.instances:
        inst.events = []
    plan = decide(snap.model_copy(update={"groups": [blank]}), spec, hist, at)
    (inc,) = incidents(plan.history)
    assert inc.state != IncidentState.CLOSED


@pytest.mark.parametrize("code", ["SystemFailure.Redeploy", "InstanceFailure.Reboot"])
def test_a_failure_event_scheduled_ahead_is_isolated_at_once(code):
    """A failure is a fault now (ECS found the host failing and only scheduled its fix): it does not wait."""
    spec = policy(
        isolation={"rules": [{"name": "ecs_failure", "events": ["*Failure.*"], "action": "replace"}]}
    )
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(days=2), code=code)
    _, hist = drive(world, spec, 5 * 60)
    (inc,) = incidents(hist)
    assert inc.due_at is None and inc.isolated_at is not None


def test_an_event_announced_again_under_a_new_id_moves_the_due_time_and_is_named_when_canceled():
    spec = policy(min_size=6)
    world = World(T0, 6)
    node = world.nodes["i-0003"]
    _maintenance(node, T0 + timedelta(days=3))
    _, hist = drive(world, spec, 60)
    _maintenance(node, T0 + timedelta(days=5), event_id="e-2")  # e-1 canceled, e-2 issued in its place
    _, hist = drive(world, spec, 60, hist)
    (inc,) = incidents(hist)
    assert inc.isolate_by == T0 + timedelta(days=5) and inc.state != IncidentState.CLOSED
    node.events = []
    _, hist = drive(world, spec, 60, hist)
    (inc,) = incidents(hist)
    assert inc.outcome == "event_ended" and "e-2" in inc.timeline[-2].detail and world.actions == []


def test_an_event_whose_not_before_passed_when_first_seen_is_isolated_at_once():
    spec = policy()
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 - timedelta(hours=1))  # still Scheduled: ECS is late
    _, hist = drive(world, spec, 5 * 60)
    (inc,) = incidents(hist)
    assert inc.due_at is None and inc.isolated_at is not None


def test_a_human_isolating_a_node_whose_maintenance_is_weeks_ahead_takes_it_out_now():
    """The isolate request found the node's open incident and did nothing: the node stayed in traffic."""
    spec = policy()
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(days=14))
    _, hist = drive(world, spec, 60)
    world.operator_actions = [
        OperatorAction(
            action_id="m1", kind="isolate", instance_id="i-0003", reason="now", at=world.now, by="bob"
        )
    ]
    _, hist = drive(world, spec, 5 * 60, hist)
    (inc,) = incidents(hist)
    assert inc.isolated_at is not None and "bob" in " ".join(e.detail for e in inc.timeline)


def test_a_maintenance_event_due_within_the_isolate_window_is_isolated_at_once():
    spec = policy()
    world = World(T0, 6)
    _maintenance(world.nodes["i-0003"], T0 + timedelta(hours=2))
    _, hist = drive(world, spec, 5 * 60)
    (inc,) = incidents(hist)
    assert inc.isolated_at is not None and inc.due_at is None
    assert inc.isolate_by == inc.detected_at + timedelta(seconds=spec.groups[0].isolation.isolate_within_s)


def test_finished_system_events_are_ignored():
    spec = policy()
    inst = instance(9, T0, events=[SystemEvent(code="SystemFailure.Reboot", cycle_status="Executed")])
    plan = decide(snapshot(T0, fleet(T0, 5) + [inst]), spec, None, T0)
    assert not plan.group(GROUP).incidents


def test_latency_outlier_against_peers_is_held_for_diagnosis():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0005"].ttft_ms = 2500
    plans, hist = drive(world, spec, 12 * 60)
    (inc,) = incidents(hist)
    assert inc.rule == "latency_outlier" and inc.action == "hold"
    assert steps_of(plans, StepAction.HOLD)
    assert world.nodes["i-0005"].state == "Standby"


def test_throttling_needs_its_number_of_samples():
    spec = policy(
        isolation={"rules": [{"throttle_reasons": ["hw_thermal"], "samples": 3, "action": "reboot"}]}
    )
    hist = None
    for k in range(3):
        at = T0 + timedelta(seconds=15 * k)
        insts = fleet(at, 5) + [instance(9, at, metrics={"gpu_throttle_reasons": 0x40})]
        plan = decide(snapshot(at, insts), spec, hist, at)
        hist = plan.history
        assert bool(plan.group(GROUP).incidents) is (k == 2)


def test_power_cap_throttling_is_not_a_fault_by_default():
    spec = policy()
    hist = None
    for k in range(10):
        at = T0 + timedelta(seconds=15 * k)
        plan = decide(snapshot(at, fleet(at, 5, gpu_throttle_reasons=0x4)), spec, hist, at)
        hist = plan.history
    assert not plan.group(GROUP).incidents


HOLD_HOT = {
    "rules": [{"name": "hot", "metric": "gpu_temperature_c", "above": 85, "for": "2m", "action": "hold"}]
}


def test_sla_risk_is_flagged_before_the_breach():
    spec = policy(isolation=HOLD_HOT)  # held for a human: still open at its respond-by
    world = World(T0, 6, notify=False)
    world.nodes["i-0003"].hot = True
    plans, _ = drive(world, spec, 20 * 60)
    codes = [(p.at, w.code) for p in plans for w in p.warnings]
    risk = min(at for at, c in codes if c == WarningCode.SLA_RESPOND_AT_RISK)
    breach = min(at for at, c in codes if c == WarningCode.SLA_RESPOND_BREACHED)
    assert risk < breach


def test_an_incident_closed_before_its_respond_by_is_never_warned_as_breached():
    """It needed no response (the SLA report counts no breach), yet the clock ran on for one more window
    after the close: a critical "sla respond breached" page and a breach on /metrics for an incident that
    could no longer be acknowledged."""
    spec = policy()  # reboot: the node is back and the incident closed well within 15 minutes
    world = World(T0, 6, notify=False)
    world.nodes["i-0003"].hot = True
    plans, hist = drive(world, spec, 40 * 60)
    (inc,) = incidents(hist)
    assert inc.state == IncidentState.CLOSED and inc.closed_at is not None and inc.closed_at < inc.respond_by
    warned = {w.code for p in plans for w in p.warnings if w.incident_id == inc.incident_id}
    assert not warned & {WarningCode.SLA_RESPOND_AT_RISK, WarningCode.SLA_RESPOND_BREACHED}


def test_isolation_does_not_wait_for_a_human():
    spec = policy()
    world = World(T0, 6, notify=False)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 6 * 60)
    (inc,) = incidents(hist)
    assert inc.acknowledged_at is None
    assert inc.isolated_at is not None


def test_notification_acknowledges_the_incident():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 4 * 60)
    (inc,) = incidents(hist)
    assert inc.acknowledged_by == "dingtalk"
    assert inc.acknowledged_at <= inc.respond_by


def test_blocked_incident_is_flagged_at_risk_at_once():
    spec = policy(guardrails={"breaker": {"max_isolations": 1, "window": "1h"}})
    world = World(T0, 10)
    for iid in ("i-0001", "i-0002", "i-0003"):
        world.nodes[iid].hot = True
    plans, _ = drive(world, spec, 3 * 60)
    assert any(
        w.code == WarningCode.SLA_ISOLATE_AT_RISK and "breaker" in w.detail for w in plans[-1].warnings
    )


def test_manual_isolation_holds_until_released():
    spec = policy()
    world = World(T0, 6)
    world.operator_actions = [
        OperatorAction(
            action_id="m1", kind="isolate", instance_id="i-0002", reason="odd logs", at=T0, by="alice"
        )
    ]
    _, hist = drive(world, spec, 5 * 60)
    (inc,) = incidents(hist)
    assert inc.manual and inc.action == "hold" and inc.acknowledged_by == "alice"
    assert world.nodes["i-0002"].state == "Standby"
    world.operator_actions = world.operator_actions + [
        OperatorAction(action_id="m2", kind="release", instance_id="i-0002", at=world.now, by="alice")
    ]
    _, hist = drive(world, spec, 60, history=hist)
    (inc,) = incidents(hist)
    assert inc.state == IncidentState.CLOSED and inc.outcome == "released"
    assert world.nodes["i-0002"].state == "InService"


def test_failed_reboot_is_retried_with_a_new_step_id_then_replaced():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    hist = None
    reboot_ids = []
    for _ in range(60):
        plan = decide(world.observe(), spec, hist, world.now)
        hist = plan.history
        for s in plan.group(GROUP).steps:
            if s.action == StepAction.REBOOT:
                reboot_ids.append(s.step_id)
                world.pending_outcomes.append(
                    StepOutcome(step_id=s.step_id, ok=False, at=world.now, detail="x")
                )
        steps = [s for s in plan.group(GROUP).steps if s.action != StepAction.REBOOT]
        world.apply(
            plan.model_copy(update={"groups": [plan.group(GROUP).model_copy(update={"steps": steps})]})
        )
        world.advance(15)
    assert len(reboot_ids) == len(set(reboot_ids)) == 3
    (inc,) = incidents(hist)
    assert inc.action == "replace"


def test_reboot_that_does_not_cure_is_replaced_after_the_health_check_timeout():
    spec = policy(
        isolation={
            "health_check_timeout": "5m",
            "rules": [
                {
                    "name": "gpu_overheat",
                    "metric": "gpu_temperature_c",
                    "above": 85,
                    "for": "2m",
                    "action": "reboot",
                }
            ],
        }
    )
    world = World(T0, 6, reboot_fixes=False)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 20 * 60)
    (inc,) = incidents(hist)
    assert inc.outcome == "replaced"
    assert any(e.reason == ReasonCode.HEALTH_CHECK_TIMEOUT for e in inc.timeline)


OVERHEAT_ONLY = {
    "rules": [
        {"name": "gpu_overheat", "metric": "gpu_temperature_c", "above": 85, "for": "2m", "action": "reboot"}
    ]
}


@pytest.mark.parametrize("reads", [None, 255.0, 0.0])  # left out by the agent, or passed on as read
def test_a_temperature_sensor_dead_after_the_reboot_passes_the_health_check_on_the_other_signals(reads):
    spec = policy(isolation=OVERHEAT_ONLY)
    world = World(T0, 6)
    node = world.nodes["i-0003"]
    node.hot, node.sensor_dies_at_reboot, node.dead_sensor_reads = True, True, reads
    _, hist = drive(world, spec, 20 * 60)
    (inc,) = incidents(hist)
    assert inc.outcome == "rebooted"
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "reboot", "exit_standby"]
    (passed,) = [e for e in inc.timeline if e.reason == ReasonCode.HEALTH_CHECK_PASSED]
    assert "gpu_temperature_c unreadable" in passed.detail
    # not at the first sample without it: only once the rule's window has passed since the reboot
    assert passed.at - node.rebooted_at >= timedelta(minutes=2)


def test_a_dead_sensor_on_a_gpu_that_throttles_for_heat_still_fails_the_health_check():
    spec = policy(isolation={**OVERHEAT_ONLY, "health_check_timeout": "5m"})
    world = World(T0, 6)
    node = world.nodes["i-0003"]
    node.hot, node.sensor_dies_at_reboot, node.thermal_throttle = True, True, True
    _, hist = drive(world, spec, 20 * 60)
    (inc,) = incidents(hist)
    assert inc.outcome == "replaced"
    assert any(e.reason == ReasonCode.HEALTH_CHECK_TIMEOUT for e in inc.timeline)


def test_repeated_faults_on_one_instance_lead_to_replacement():
    spec = policy(
        min_size=6,
        isolation={
            "max_reboots": 1,
            "rules": [
                {
                    "name": "gpu_overheat",
                    "metric": "gpu_temperature_c",
                    "above": 85,
                    "for": "2m",
                    "action": "reboot",
                }
            ],
        },
    )
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 20 * 60)
    world.nodes["i-0003"].hot = True  # it comes back
    _, hist = drive(world, spec, 20 * 60, history=hist)
    second = incidents(hist)[-1]
    assert second.outcome == "replaced"
    assert any(e.reason == ReasonCode.REPEATED_FAULT for e in second.timeline)


def test_no_scale_in_while_an_isolated_instance_has_no_replacement():
    spec = policy(min_size=1, warm_floor=1)
    at = T0
    hist = None
    # a quiet fleet of 4 (would scale in) with one node held in Standby by a manual isolation
    ops = [OperatorAction(action_id="m", kind="isolate", instance_id="i-003", at=at, by="ops")]
    plan = decide(snapshot(at, fleet(at, 4, waiting=0), operator_actions=ops), spec, hist, at)
    hist = plan.history
    for k in range(1, 60):
        at = T0 + timedelta(seconds=15 * k)
        insts = fleet(at, 3, waiting=0) + [
            instance(3, at, state="Standby", metrics={"queue_waiting": 0, "requests_running": 0})
        ]
        plan = decide(snapshot(at, insts, desired=5, operator_actions=ops), spec, hist, at)
        hist = plan.history
    gp = plan.group(GROUP)
    assert gp.serving_target == 4
    assert gp.reason == ReasonCode.SCALE_IN_BLOCKED_ISOLATION


def test_restart_from_persisted_history_resumes_without_duplicate_steps():
    spec = policy()
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 3 * 60)
    restored = History.model_validate_json(hist.model_dump_json())
    snap = world.observe()
    a = decide(snap, spec, hist, world.now)
    b = decide(snap, spec, restored, world.now)
    assert a.model_dump() == b.model_dump()
    # a step repeated across ticks keeps its id, so the service's ClientToken dedups it
    again = decide(snap, spec, a.history, world.now)
    ids_a = {s.step_id for s in a.group(GROUP).steps}
    ids_again = {s.step_id for s in again.group(GROUP).steps}
    assert ids_again <= ids_a | {s.step_id for s in again.group(GROUP).steps if s.action == StepAction.WAIT}


def test_operator_actions_apply_once():
    spec = policy()
    ops = [OperatorAction(action_id="x", kind="isolate", instance_id="i-001", at=T0, by="bob")]
    plan = decide(snapshot(T0, fleet(T0, 6), operator_actions=ops), spec, None, T0)
    at = T0 + timedelta(seconds=15)
    plan = decide(snapshot(at, fleet(at, 6), operator_actions=ops), spec, plan.history, at)
    assert len(plan.history.groups[GROUP].incidents) == 1


def test_isolating_an_unknown_instance_is_reported():
    ops = [OperatorAction(action_id="x", kind="isolate", instance_id="i-nope", at=T0)]
    plan = decide(snapshot(T0, fleet(T0, 3), operator_actions=ops), policy(), None, T0)
    assert any(w.code == WarningCode.UNKNOWN_INSTANCE for w in plan.warnings)


def test_isolation_can_be_switched_off():
    spec = policy(isolation={"enabled": False})
    world = World(T0, 6)
    world.nodes["i-0003"].hot = True
    _, hist = drive(world, spec, 5 * 60)
    assert not incidents(hist)


@given(
    st.lists(
        st.tuples(
            # repeated values: ties in the median
            st.sampled_from([100.0, 250.0, 250.0, 900.0, 2500.0, float("nan")]),
            st.sampled_from([0.0, 30.0, 600.0]),  # fresh, fresh, stale (stale_after is 2 minutes)
            st.sampled_from(["InService", "InService", "Standby"]),
        ),
        max_size=12,
    )
)
def test_an_outliers_peers_read_once_per_tick_are_the_others_fresh_values(rows):
    import statistics

    from policies.isolation.detection import Peers
    from policies.observe import classify, fresh

    insts = [
        instance(n, T0, state=state, metrics={"ttft_p99_ms": v}, age_s=age)
        for n, (v, age, state) in enumerate(rows)
    ]
    view = classify(snapshot(T0, insts).groups[0])
    peers = Peers.of(view, "ttft_p99_ms", T0, 120.0)
    for inst in insts:
        # what the outlier rule compared each instance with before: its fresh InService peers, one by one
        expected = [
            q.metrics["ttft_p99_ms"].value
            for q in view.serving
            if q.instance_id != inst.instance_id and fresh(q.metrics.get("ttft_p99_ms"), T0, 120.0)
        ]
        got = peers.without(inst.instance_id)
        assert sorted(got) == sorted(expected)
        if got:
            assert statistics.median(got) == statistics.median(expected)


def _blind(snap):
    """The snapshot as the service builds it while ESS cannot be read: the last instance list, marked."""
    return snap.model_copy(update={"groups": [g.model_copy(update={"blind": True}) for g in snap.groups]})


def test_with_ess_unreadable_a_hot_node_is_detected_admitted_and_announced_and_isolated_once_ess_answers():
    spec = policy()
    world = World(T0, 6, demand=lambda at: 5.0)
    world.nodes["i-0003"].hot = True
    world.nodes["i-0004"].silent = True  # a silence is not read while blind: a node ESS removed falls silent
    history, blind = None, []
    for _ in range(40):  # ten minutes without ESS
        plan = decide(_blind(world.observe()), spec, history, world.now)
        history = plan.history
        world.apply(plan)
        blind.append(plan)
        world.advance(15)
    (inc,) = incidents(history)
    assert inc.instance_id == "i-0003" and inc.rule == "gpu_overheat" and inc.admitted_at is not None
    assert (inc.detected_at - T0).total_seconds() <= 180
    assert {s.action for p in blind for s in p.group(GROUP).steps} == {StepAction.ACKNOWLEDGE}
    assert all(p.group(GROUP).desired_capacity is None for p in blind)
    assert all(p.group(GROUP).reason == ReasonCode.GROUP_NOT_OBSERVED for p in blind)
    assert not world.actions  # nothing written
    drive(world, spec, 10 * 60, history=history)  # ESS answers again: the isolation goes on from there
    assert [a for _, a, i in world.actions if i == "i-0003"][:2] == ["enter_standby", "reboot"]


def test_with_ess_unreadable_slow_launches_that_serve_close_their_incidents_as_recovered():
    # Launches load 15 minutes past the cold start: each is judged failed and its engine_down incident held.
    # ESS becomes unreadable before they serve; once they serve, their incidents close as recovered on the
    # blind ticks (the verdict and the close need no ESS call), not only once ESS answers again.
    spec = policy(max_size=20)
    world = World(T0, 6, demand=lambda at: 8.0)
    world.slow_launch_s = 15 * 60
    _, history = drive(world, spec, 12 * 60)
    held = [i for i in incidents(history) if i.open]
    assert held and all(i.unserved and i.admitted_at is None for i in held)
    served_at = max(world.nodes[i.instance_id].loads_until for i in held)
    for _ in range(10 * 4):  # ten minutes without ESS, past the launches' serving
        plan = decide(_blind(world.observe()), spec, history, world.now)
        history = plan.history
        world.apply(plan)
        world.advance(15)
    ids = {i.incident_id for i in held}
    closed = [i for i in incidents(history) if i.incident_id in ids]
    assert all(i.outcome == "recovered" for i in closed)
    assert all(i.closed_at is not None and i.closed_at <= served_at + timedelta(minutes=1) for i in closed)
    assert not world.actions  # nothing written


def _hot_node_with_ecs_down(down_for: timedelta, seconds: int):
    """i-0003 overheats from the start while ECS's API is down for ``down_for``: the world, the incident."""
    world = World(T0, 6, demand=lambda at: 5.0)
    world.nodes["i-0003"].hot = True
    world.ecs_down_until = T0 + down_for
    _, hist = drive(world, policy(), seconds)
    (inc,) = incidents(hist)
    return world, inc


def test_a_reboot_ecs_did_not_take_is_asked_again_and_never_passed_as_done():
    # ECS's API down while the hot node waits in Standby: each reboot errors. Resting in Standby the GPU
    # cools and its throttling clears, so a health check judged then passed and returned the node unmended
    # ("rebooted") without any reboot; now the reboot is asked again until ECS takes it
    world, inc = _hot_node_with_ecs_down(timedelta(minutes=10), 25 * 60)
    assert len(world.errors) > 3 and all(a == "reboot" for _, a, _ in world.errors)
    done = [(at, a) for at, a, i in world.actions if i == "i-0003"]
    assert [a for _, a in done] == ["enter_standby", "reboot", "exit_standby"]
    assert done[1][0] >= world.ecs_down_until  # the one real reboot came once ECS answered
    assert inc.outcome == "rebooted"


def test_a_reboot_never_confirmed_within_the_health_timeout_replaces_the_node():
    world, inc = _hot_node_with_ecs_down(timedelta(hours=2), 30 * 60)
    assert [a for _, a, i in world.actions if i == "i-0003"] == ["enter_standby", "remove"]
    assert inc.outcome == "replaced"


def test_a_group_renamed_in_the_config_takes_over_the_open_incidents_of_its_instances():
    """Renaming a group in fleet.yaml left its open incidents under the old name, decided by nobody: the
    node stayed in Standby for good, listed as an open incident, and a release reached the new group's
    history, which had no incident for it, and did nothing."""
    from policies import GroupSnapshot, OperatorAction, Snapshot

    def snap(name, at, state, ops=()):
        instances = [instance(i, at, state=state if i == 1 else "InService") for i in range(4)]
        group = GroupSnapshot(name=name, desired_capacity=4, instances=instances, operator_actions=list(ops))
        return Snapshot(taken_at=at, groups=[group])

    old = policy(name="chat-old")
    at = MONDAY_10_SHANGHAI
    isolate = OperatorAction(action_id="r1", kind="isolate", at=at, instance_id="i-001", by="al")
    hist = decide(snap("chat-old", at, "InService", [isolate]), old, None, at).history
    at += timedelta(seconds=15)
    hist = decide(snap("chat-old", at, "Standby"), old, hist, at).history
    [inc] = hist.groups["chat-old"].incidents
    assert inc.open and inc.isolated_at is not None
    at += timedelta(seconds=15)  # the same scaling group, now named "chat" in the config
    release = OperatorAction(action_id="r2", kind="release", at=at, instance_id="i-001", by="al")
    plan = decide(snap(GROUP, at, "Standby", [release]), policy(), hist, at)
    assert [i.incident_id for i in plan.history.groups[GROUP].incidents] == [inc.incident_id]
    assert not any(i.open for i in plan.history.groups["chat-old"].incidents)
    steps = [s.action for s in plan.group(GROUP).steps if s.instance_id == "i-001"]
    assert steps == [StepAction.EXIT_STANDBY]


def _incidents_after_ten_minutes_of(metrics: dict[str, float]) -> list[str]:
    spec = policy()
    hist = None
    for k in range(41):  # a sample every 15 s for 10 minutes
        at = T0 + timedelta(seconds=15 * k)
        insts = fleet(at, 5) + [instance(9, at, metrics=metrics)]
        plan = decide(snapshot(at, insts), spec, hist, at)
        hist = plan.history
    return [i.rule for i in hist.groups[GROUP].incidents]


@pytest.mark.parametrize(
    "metrics",
    [
        {"gpu_temperature_c": 255.0},  # a failed sensor's 0xFF, as NVML passes it on
        {"gpu_temperature_c": 0.0},  # a sensor that answers nothing
        {"gpu_mem_used_pct": 104.0},  # MIG / vGPU: reserved memory counted in "used" but not in "total"
    ],
)
def test_a_bogus_sensor_reading_isolates_nothing(metrics):
    assert _incidents_after_ten_minutes_of(metrics) == []


@pytest.mark.parametrize(
    ("metrics", "rule"),
    [({"gpu_temperature_c": 96.0}, "gpu_overheat"), ({"gpu_mem_used_pct": 99.0}, "gpu_memory_full")],
)
def test_a_real_reading_over_the_threshold_still_isolates(metrics, rule):
    assert _incidents_after_ten_minutes_of(metrics) == [rule]


@pytest.mark.parametrize(
    ("state", "rule", "action"),
    [(1.0, "row_remap_pending", "reboot"), (2.0, "row_remap_failure", "replace"), (0.0, None, None)],
)
def test_row_remapping_pending_reboots_and_failure_replaces(state, rule, action):
    spec = policy()
    at = T0
    plan = decide(
        snapshot(at, fleet(at, 5) + [instance(9, at, metrics={"gpu_row_remap": state})]), spec, None, at
    )
    found = [(i.rule, i.action) for i in plan.group(GROUP).incidents]
    assert found == ([(rule, action)] if rule else [])
