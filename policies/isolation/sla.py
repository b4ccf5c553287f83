"""SLA clocks: the response clock (acknowledge within ``respond_within``, 15 min by default) and the isolation
clock (out of traffic within ``isolate_within``, 4 h), each warned about at risk and when breached.

The two run side by side: isolation never waits for a human. Both stop when the incident closes: one closed
before its respond-by (recovered, its instance gone, remediated) needed no response (``respond_breached``,
the rule the SLA report, ``fleet/service/views.py``, and the simulator's incident list judge by), and one that
could no longer be acknowledged was warned about as at risk and breached for one more window (a critical
page, and a breach counted on ``/metrics`` that the report did not count).

The isolate clock of a system event ECS scheduled ahead (``events.py``) starts when its isolation falls due,
``isolate_within`` before the event's NotBefore, and ends at the NotBefore (``isolate_by``): before that
nothing is asked of the isolation, so nothing is at risk. Its respond clock runs from detection as any other.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from policies.isolation.shared import Tick
from policies.model import OPEN_STATES, Incident, WarningCode


def respond_breached(
    respond_by: datetime, responded_at: datetime | None, closed_at: datetime | None, now: datetime
) -> bool:
    """Whether an incident breached its response clock, judged at ``now``: nobody responded by ``respond_by``
    while it was open. One that closed before the deadline (recovered, its instance gone, remediated)
    needed no response; one still open and unanswered is judged by ``now``. The SLA report and the
    simulator's incident list both judge by this rule."""
    stopped = min((t for t in (responded_at, closed_at) if t is not None), default=now)
    return stopped > respond_by


def isolate_breached(
    isolate_by: datetime, isolated_at: datetime | None, closed_at: datetime | None, now: datetime
) -> bool:
    """Whether an incident breached its isolate clock, judged at ``now``: its node was neither out of traffic
    nor its incident closed (recovered, released, its node replaced) by ``isolate_by``. One that stayed open
    and unisolated past the deadline breached it even if it closed later, as the live clock warned then
    (``_isolate_clock``: ``sla_isolate_breached`` on ``/metrics``). The SLA report and the simulator's
    incident list both judge by this rule."""
    stopped = min((t for t in (isolated_at, closed_at) if t is not None), default=now)
    return stopped > isolate_by


def check_clocks(t: Tick) -> None:
    gh = t.gh
    for inc in gh.incidents:
        if inc.state in OPEN_STATES:
            _respond_clock(t, inc)
            if inc.scheduled_ahead(t.now):
                continue  # its isolate clock starts when its isolation falls due (``events.py``)
            blocked = inc.admitted_at is None and gh.breaker.open and not inc.manual
            _isolate_clock(t, inc, blocked)


def _respond_clock(t: Tick, inc: Incident) -> None:
    if inc.acknowledged_at is not None:
        return
    if t.now > inc.respond_by:
        t.warn_about(
            WarningCode.SLA_RESPOND_BREACHED, inc, f"not acknowledged by {inc.respond_by.isoformat()}"
        )
    elif t.now >= inc.detected_at + timedelta(seconds=t.iso.respond_within_s * t.iso.at_risk_fraction):
        t.warn_about(WarningCode.SLA_RESPOND_AT_RISK, inc, f"acknowledge by {inc.respond_by.isoformat()}")


def _isolate_clock(t: Tick, inc: Incident, blocked: bool) -> None:
    if inc.isolated_at is not None:
        return
    if t.now > inc.isolate_by:
        t.warn_about(WarningCode.SLA_ISOLATE_BREACHED, inc, f"not isolated by {inc.isolate_by.isoformat()}")
    elif blocked or t.now >= inc.isolate_from + timedelta(
        seconds=t.iso.isolate_within_s * t.iso.at_risk_fraction
    ):
        why = " (blocked: breaker open)" if blocked else ""
        t.warn_about(WarningCode.SLA_ISOLATE_AT_RISK, inc, f"isolate by {inc.isolate_by.isoformat()}{why}")
