"""Bookkeeping at the end of a tick: what the scaler needs to know, and the history pruned to its retention.

Closed incidents, XID records and repeat rules' episodes are kept for a day, or for the longest window that
reads them (the breaker's, a rule's) when that is longer.
"""

from __future__ import annotations

from datetime import timedelta

from policies.isolation.shared import DAY_S, Tick
from policies.model import OPEN_STATES


def summarize(t: Tick) -> None:
    """Unreplaced incidents (scale-in waits for them) and the suspect instances, most suspect first."""
    gh, result = t.gh, t.result
    for inc in gh.incidents:
        if inc.state in OPEN_STATES and inc.admitted_at is not None and inc.remediated_at is None:
            result.unreplaced += 1
    degraded = [i.instance_id for i in t.open_in_detection_order()]
    unhealthy = [
        i.instance_id
        for i in t.group.instances
        if i.health_status != "Healthy" and i.instance_id not in degraded
    ]
    result.degraded = degraded + sorted(unhealthy)


def prune(t: Tick) -> None:
    gh, iso, now = t.gh, t.iso, t.now
    retention = max(DAY_S, t.spec.guardrails.breaker.window_s, *(r.window_s for r in iso.rules))
    cutoff = now - timedelta(seconds=retention)
    gh.incidents = [i for i in gh.incidents if i.state in OPEN_STATES or (i.closed_at or now) > cutoff]
    gh.xids = [x for x in gh.xids if x.at > cutoff]
    gh.episodes = [e for e in gh.episodes if e.at > cutoff]
    gh.clear_at = {k: at for k, at in gh.clear_at.items() if at > cutoff}
