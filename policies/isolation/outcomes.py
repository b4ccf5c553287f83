"""Outcomes of the steps the service actuated, read once each: a reboot issued, or a step that failed.

A failed step is counted and asked again with a new step id (its id counts the failures: a new ClientToken);
three failed reboots escalate to a replacement (``MAX_STEP_FAILURES``, in the REMEDIATING handler).
"""

from __future__ import annotations

from policies.isolation.shared import REMEMBERED_IDS, Tick, note
from policies.model import OPEN_STATES, Incident, ReasonCode, StepAction, StepOutcome

# The request time each action clears when it fails, so that the incident's handler asks again.
_REQUESTED_AT = {
    StepAction.REBOOT.value: "reboot_requested_at",
    StepAction.ENTER_STANDBY.value: "standby_requested_at",
    StepAction.EXIT_STANDBY.value: "exit_requested_at",
    StepAction.REMOVE.value: "remove_requested_at",
}


def read_outcomes(t: Tick) -> None:
    gh = t.gh
    seen = set(gh.seen_outcomes)
    for out in t.group.outcomes:
        if out.step_id in seen:
            continue
        seen.add(out.step_id)
        gh.seen_outcomes.append(out.step_id)
        # step ids are "<incident id>:<action>:<attempt>" (StepLog.add); incident ids contain colons
        inc_id, _, _attempt = out.step_id.rpartition(":")
        inc_id, _, action = inc_id.rpartition(":")
        inc = t.incident(inc_id)
        if inc is None or inc.state not in OPEN_STATES:
            continue
        if out.ok:
            if action == StepAction.REBOOT.value and inc.rebooted_at is None:
                inc.rebooted_at = out.at
                note(inc, t.now, ReasonCode.REBOOT, "reboot issued")
        else:
            _failed(t, inc, action, out)
    gh.seen_outcomes = gh.seen_outcomes[-REMEMBERED_IDS:]


def _failed(t: Tick, inc: Incident, action: str, out: StepOutcome) -> None:
    inc.failures[action] = inc.failures.get(action, 0) + 1
    note(inc, t.now, ReasonCode.STEP_FAILED, f"{action} failed: {out.detail}")
    field = _REQUESTED_AT.get(action)
    if field is not None:
        setattr(inc, field, None)  # a failed step is asked again with a new step id (a new ClientToken)
