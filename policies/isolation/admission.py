"""Admission under the guardrails, in detection order: the breaker, then ``max_isolated``.

An admitted incident may take its instance out of traffic. One whose isolation is not due yet (a system
event ECS scheduled ahead, ``events.py``) waits for it and counts toward neither guardrail. Automatic
incidents wait while the breaker is
open, and trip it when more of them opened within its window than it allows (only a human resets it); any
incident, manual ones included, waits while ``max_isolated`` instances are already out. Waiting incidents
get a WAIT step every tick, so the plan says why nothing happens.

Both guardrails ration serving capacity. An incident found on a launch that never served
(``Incident.unserved``: a dead launch, a GPU fault before the engine came up) takes none out, so it counts
toward neither: a run of broken launches must not trip the breaker and hold a real fault on a serving node
behind it until a human resets it. It still waits while the breaker is open, and while launches keep
failing (``policies.launch_verdicts.failed_run``): its replacement would be launched the same way, and
the launches' scaling step removes the instance instead (``policies/scaling/launches.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from policies import metrics as m
from policies.isolation.shared import Tick, close, note
from policies.launch_verdicts import (
    REMOVE_AFTER_S,
    failed_run,
    judged_by,
    late_launch,
    serves_nothing,
    verdict,
)
from policies.model import Incident, LaunchRecord, PlanWarning, ReasonCode, StepAction, WarningCode
from policies.spec import resolve_count

# How long past its due time a launch's verdict is waited for: the judge needs a fresh engine reading, and a
# launch that no reading judges (its agent silent) is not waited for beyond this.
_VERDICT_SLACK = timedelta(minutes=5)


@dataclass
class _Limits:
    max_isolated: int
    breaker_limit: int
    # rank of each automatic incident opened within the breaker's window, 1 = the oldest
    rank: dict[str, int]


def admit(t: Tick) -> None:
    """Admit the open incidents the guardrails allow; warn while the breaker is open."""
    limits = _limits(t)
    ordered = t.open_in_detection_order()
    # what is out of traffic: an admitted incident on a launch that never served took no capacity out
    admitted = [i for i in ordered if i.admitted_at is not None and not i.took_no_capacity]
    failed = failed_run(t.gh.launches)
    for inc in ordered:
        if inc.admitted_at is not None or inc.incident_id in t.released:
            continue
        if inc.instance_id not in t.by_id:
            continue  # closed by its handler as gone
        if inc.scheduled_ahead(t.now):
            _wait_for_event(t, inc)
            continue
        if not inc.manual and _held_by_breaker(t, inc, limits):
            continue
        if inc.unserved and _closed_as_served(t, inc):
            continue
        if inc.unserved:  # (still: a launch that has since served makes it one of serving capacity)
            if not _launch_waits(t, inc, failed):
                inc.admitted_at = t.now
            continue
        if _dead(t, inc):
            # its node serves nothing: taking it out takes no serving capacity, so it needs no room and takes
            # none (a dead node waiting behind a live one that cannot be spared would be billed for nothing)
            inc.admitted_at, inc.served_nothing = t.now, True
            continue
        if len(admitted) >= limits.max_isolated:
            _wait_for_room(t, inc, len(admitted), limits.max_isolated)
            continue
        inc.admitted_at = t.now
        admitted.append(inc)
    if t.gh.breaker.open:
        t.result.warnings.append(
            PlanWarning(code=WarningCode.BREAKER_OPEN, group=t.group.name, detail=t.gh.breaker.reason)
        )


def _dead(t: Tick, inc: Incident) -> bool:
    """Whether the incident's instance serves nothing now (``serves_nothing``): it counts toward no room."""
    inst = t.by_id.get(inc.instance_id)
    return inst is not None and serves_nothing(inst, t.now, t.stale_after_s)


def _limits(t: Tick) -> _Limits:
    guard = t.spec.guardrails
    size = t.view.size
    window_start = t.now - timedelta(seconds=guard.breaker.window_s)
    # an incident counts from when its isolation fell due (a system event ECS scheduled ahead: ``due_at``)
    recent_auto = sorted(
        (
            i
            for i in t.gh.incidents
            if not i.manual and not i.unserved and window_start < i.isolate_from <= t.now
        ),
        key=lambda i: (i.isolate_from, i.incident_id),
    )
    return _Limits(
        max_isolated=guard.max_isolated_for(size),
        breaker_limit=max(1, resolve_count(guard.breaker.max_isolations, size)),
        rank={inc.incident_id: n + 1 for n, inc in enumerate(recent_auto)},
    )


def _held_by_breaker(t: Tick, inc: Incident, limits: _Limits) -> bool:
    """An automatic incident waits while the breaker is open; one past the breaker's limit trips it."""
    breaker = t.gh.breaker
    if breaker.open:
        t.wait(inc, ReasonCode.BREAKER_OPEN, breaker.reason)
        return True
    rank = limits.rank.get(inc.incident_id, 0)
    if rank <= limits.breaker_limit:
        return False
    breaker.open = True
    breaker.opened_at = t.now
    breaker.reason = (
        f"{rank} isolations requested within "
        f"{t.spec.guardrails.breaker.window_s:g}s (limit {limits.breaker_limit}); "
        "automatic isolation paused until a human resets the breaker"
    )
    note(inc, t.now, ReasonCode.BREAKER_TRIPPED, breaker.reason)
    t.wait(inc, ReasonCode.BREAKER_TRIPPED, breaker.reason)
    return True


def _closed_as_served(t: Tick, inc: Incident) -> bool:
    """A held incident found on a launch that has since served (slow to load, not dead): one of the engine's
    health closes as recovered, before any action (what it was opened for is gone; without this it would be
    admitted once its wait ran out, and a node just come into service rebooted). Any other (a GPU's fault
    found while the engine loaded) is a fault of serving capacity from now on, which the guardrails count."""
    record = verdict(t.gh.launches, inc.instance_id)
    if record is None or not record.served:
        return False
    rule = t.rule_of(inc)
    if rule is None or rule.metric not in m.ENGINE_HEALTH_METRICS:
        inc.unserved = False
        note(inc, t.now, ReasonCode.UNSERVED_LAUNCH, "its launch serves now: the guardrails count it")
        return False
    note(inc, t.now, ReasonCode.RECOVERED, "its launch served after all: slow to load, not dead")
    close(inc, t.now, ReasonCode.RECOVERED, "recovered")
    return True


def _launch_waits(t: Tick, inc: Incident, failed: list[LaunchRecord]) -> bool:
    """Whether an incident on a launch that never served waits: for its launch's verdict, which comes while
    the instance still runs in the group (a dead launch taken out first would never be judged, and the run of
    failures that stops more launches would never be seen); while launches here are known to be slower than
    the cold start (one judged failed served after all), for as long as a failing run's dead launch would be
    kept (a reboot would only start the slow load over); then while launches keep failing."""
    inst = t.by_id[inc.instance_id]
    due = judged_by(inst, t.load_s)
    if verdict(t.gh.launches, inc.instance_id) is None and due is not None and t.now < due + _VERDICT_SLACK:
        detail = f"waits for its launch's verdict (due {due:%H:%M}Z): a dead launch is the launches' business"
        t.wait(inc, ReasonCode.UNSERVED_LAUNCH, detail)
        return True
    late = late_launch(t.gh.launches, t.now)
    if late is not None and due is not None and t.now < due + timedelta(seconds=REMOVE_AFTER_S):
        until = due + timedelta(seconds=REMOVE_AFTER_S)
        detail = (
            f"launches here take longer than cold_start_s ({late.instance_id} served "
            f"{late.load_s or 0.0:.0f}s after it was ordered): waits for this one to load until "
            f"{until:%H:%M}Z"
        )
        t.wait(inc, ReasonCode.UNSERVED_LAUNCH, detail)
        return True
    if failed:
        detail = (
            f"the {len(failed)} newest launches never served: a replacement would be launched the same way; "
            "the instance is removed instead (it serves nothing)"
        )
        t.wait(inc, ReasonCode.LAUNCHES_FAILING, detail, failed_in_a_row=len(failed))
        return True
    return False


def _wait_for_event(t: Tick, inc: Incident) -> None:
    """A system event ECS scheduled ahead (``events.py``): nothing is done to the node until it is due."""
    assert inc.due_at is not None
    detail = f"isolation due at {inc.due_at.isoformat()}, before ECS acts at {inc.isolate_by.isoformat()}"
    # the timeline has it once already (``events.py``): a step only, for the plan to say why nothing happens
    t.steps.add(inc, StepAction.WAIT, ReasonCode.EVENT_SCHEDULED, detail, due_at=inc.due_at.isoformat())


def _wait_for_room(t: Tick, inc: Incident, isolated: int, max_isolated: int) -> None:
    detail = f"{isolated} of at most {max_isolated} instances already out for isolation"
    t.wait(inc, ReasonCode.GUARDRAIL_MAX_ISOLATED, detail, isolated=isolated, max_isolated=max_isolated)
    t.warn_about(WarningCode.GUARDRAIL_MAX_ISOLATED, inc, detail)
