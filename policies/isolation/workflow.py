"""``run``: one isolation tick of one group, a short orchestrator over the steps in their order.

Each step reads and advances the same ``Tick`` (the group history, deep-copied by ``decide``, and the result);
the order matters: what humans did counts before detection, detection before admission, admission before the
incident handlers, and the SLA clocks read the incidents as the handlers left them.
"""

from __future__ import annotations

from datetime import datetime

from policies.isolation.admission import admit
from policies.isolation.advance import advance_all, notify_only
from policies.isolation.detection import close_recovered, open_or_escalate
from policies.isolation.events import schedule_events
from policies.isolation.operator import acknowledge_notified, apply_operator_actions
from policies.isolation.outcomes import read_outcomes
from policies.isolation.pruning import prune, summarize
from policies.isolation.shared import IsolationResult, Tick
from policies.isolation.sla import check_clocks
from policies.model import GroupHistory, GroupSnapshot
from policies.observe import GroupView
from policies.spec import GroupSpec

STEPS = (
    apply_operator_actions,  # operator.py: ack, isolate, release, replace, reset the breaker; once each
    acknowledge_notified,  # operator.py: a notification to a human channel is the acknowledgment
    read_outcomes,  # outcomes.py: reboots issued, failed steps asked again
    open_or_escalate,  # detection.py: findings open incidents or escalate open ones
    close_recovered,  # detection.py: held incidents whose condition has read clear for 10 minutes close
    schedule_events,  # events.py: system events ECS scheduled ahead are isolated as their NotBefore nears
    admit,  # admission.py: the breaker and max_isolated, in detection order
    advance_all,  # advance.py: one handler per IncidentState
    check_clocks,  # sla.py: respond and isolate clocks, at risk and breached
    summarize,  # pruning.py: unreplaced and degraded, for the scaler
    prune,  # pruning.py: the history kept to its retention
)
# ESS unreadable (the group's instance list is the last one read): detect, admit (the guardrails on that
# list; the actuator checks them again before its write) and notify; the operator actions the shell passes
# (those that need no ESS: an ack, a breaker reset) are applied, and every step that needs ESS waits for it
# to answer again.
BLIND_STEPS = (
    apply_operator_actions,
    acknowledge_notified,
    read_outcomes,
    open_or_escalate,
    schedule_events,
    admit,
    notify_only,  # advance.py: the notification of each incident, nothing else
    check_clocks,
    summarize,
    prune,
)


def run(
    spec: GroupSpec,
    gh: GroupHistory,
    group: GroupSnapshot,
    view: GroupView,
    floor: int,
    now: datetime,
) -> IsolationResult:
    """Advance every incident of one group by one tick; open new ones; return the steps."""
    tick = Tick(spec=spec, gh=gh, group=group, view=view, floor=floor, now=now)
    for step in BLIND_STEPS if group.blind else STEPS:
        step(tick)
    return tick.result
