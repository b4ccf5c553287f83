"""The health check after a reboot: the instance reports again and the fault its rule found is gone.

One check per rule kind, as detection has one detector per kind; a kind without a check (outlier, manual)
passes once the instance reports fresh metrics newer than the reboot.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from policies import metrics as m
from policies.model import GroupHistory, InstanceSnapshot, MetricSample
from policies.observe import fresh
from policies.spec import IsolationRule

Check = Callable[[IsolationRule, InstanceSnapshot, GroupHistory, datetime, datetime, float], tuple[bool, str]]


def healthy_again(
    rule: IsolationRule | None,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale_after: float,
) -> tuple[bool, str]:
    """After a reboot: the instance reports fresh metrics newer than the reboot and its fault is gone."""
    if inst.health_status != "Healthy":
        return False, f"health status {inst.health_status}"
    newer = [s for s in inst.metrics.values() if s.at > since and fresh(s, now, stale_after)]
    if not newer:
        return False, "no metrics since the reboot yet"
    engine_ok, engine_why = _engine_serves(inst, since, now, stale_after)
    if not engine_ok:
        return False, engine_why
    check = _CHECKS.get(rule.kind) if rule is not None else None
    if rule is None or check is None:
        return True, "reporting again"
    return check(rule, inst, gh, since, now, stale_after)


def _engine_serves(inst: InstanceSnapshot, since: datetime, now: datetime, stale: float) -> tuple[bool, str]:
    """Where the agent reports vLLM's state (``vllm_up``), the engine serves again: after a reboot the GPUs
    report within a minute while the weights load for the cold start, and an instance back in traffic before
    its engine serves would take requests it cannot answer. An agent that does not report it passes."""
    if m.VLLM_UP not in inst.metrics:
        return True, "engine state not reported"
    s = _since_reboot(m.VLLM_UP, inst, since, now, stale)
    if s is None:
        return False, "no vllm_up since the reboot yet"
    if s.value < m.ENGINE_DOWN_BELOW:
        return False, "vLLM not serving yet (loading the weights)"
    return True, "vLLM serving"


def _metric(
    rule: IsolationRule,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    assert rule.metric is not None
    s = _since_reboot(rule.metric, inst, since, now, stale)
    if s is None or not m.plausible(rule.metric, s.value):
        return _unreadable(rule, s, inst, since, now, stale)
    bad = s.value > rule.above if rule.above is not None else s.value < (rule.below or 0.0)
    return (not bad), f"{rule.metric}={s.value:g}"


# The throttle reasons a GPU sets itself when it runs hot, whatever its temperature sensor says.
_THERMAL_THROTTLE = m.throttle_mask(("sw_thermal", "hw_thermal"))


def _unreadable(
    rule: IsolationRule,
    s: MetricSample | None,
    inst: InstanceSnapshot,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    """The rule's metric has no reading since the reboot. For one a sensor gives (PLAUSIBLE_RANGE: a dead
    temperature sensor reads 0 or 255 C, and the agent leaves that out), the sensor may have died across the
    reboot on a node that works: once the rule's window (at least the staleness horizon) has passed with the
    instance reporting its other metrics and its engine serving (``healthy_again`` checked both), the check
    passes on them, its reason saying the metric is unreadable, rather than time out and replace the node.
    A GPU that still runs hot throttles itself (sw/hw thermal), which fails it here and is what
    ``gpu_throttled`` watches while the sensor stays dead. Any other metric waits for its reading."""
    metric = rule.metric
    assert metric is not None
    waiting = f"no {metric} since the reboot yet" if s is None else f"{metric}={s.value:g} is no reading"
    if metric not in m.PLAUSIBLE_RANGE or (now - since).total_seconds() < max(rule.for_s, stale):
        return False, waiting
    if metric == m.GPU_TEMPERATURE_C:
        throttle = _since_reboot(m.GPU_THROTTLE_REASONS, inst, since, now, stale)
        if throttle is not None and int(throttle.value) & _THERMAL_THROTTLE:
            return False, f"{metric} unreadable and the GPU throttles for heat ({int(throttle.value):#x})"
    return True, f"{metric} unreadable since the reboot (a dead sensor?): passed on the other signals"


def _absent(
    rule: IsolationRule,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    assert rule.metric is not None
    if _since_reboot(rule.metric, inst, since, now, stale) is None:
        return False, f"no {rule.metric} since the reboot yet: the agent is still silent"
    return True, f"{rule.metric} reported again"


def _since_reboot(
    metric: str, inst: InstanceSnapshot, since: datetime, now: datetime, stale: float
) -> MetricSample | None:
    """The instance's sample of ``metric``, if a fresh one came after the reboot."""
    s = inst.metrics.get(metric)
    return s if s is not None and s.at > since and fresh(s, now, stale) else None


def _throttle(
    rule: IsolationRule,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    s = inst.metrics.get(m.GPU_THROTTLE_REASONS)
    if s is None or s.at <= since or not fresh(s, now, stale):
        return False, "no throttle reasons since the reboot yet"
    bits = int(s.value) & m.throttle_mask(rule.throttle_reasons or ())
    return bits == 0, f"throttle reasons {int(s.value):#x}"


def _xid(
    rule: IsolationRule,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    again = [
        x
        for x in gh.xids
        if x.instance_id == inst.instance_id and x.code in (rule.xids or ()) and x.at > since
    ]
    return (not again), ("XID again after reboot" if again else "no XID since the reboot")


def _event(
    rule: IsolationRule,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale: float,
) -> tuple[bool, str]:
    active = [e.code for e in inst.events if e.active and rule.matches_event(e.code)]
    return (not active), ("event still active: " + ",".join(active)) if active else "event cleared"


def unmended_by_reboot(rule: IsolationRule | None, inst: InstanceSnapshot) -> list[str]:
    """The active system events of ``inst`` that ``rule`` matches and that a reboot does not end: ECS asks
    to move the instance to other hardware (``SystemMaintenance.Redeploy``), to stop or release it, where a
    reboot by the user on the same host changes nothing and its health check would wait out its timeout on
    an event still active. ``*.Reboot*`` events (a reboot inside the window avoids or completes them) are
    not among them; empty for a rule that reads no events."""
    if rule is None:
        return []
    return [
        e.code
        for e in inst.events
        if e.active and rule.matches_event(e.code) and not e.code.partition(".")[2].startswith("Reboot")
    ]


_CHECKS: dict[str, Check] = {
    "metric": _metric,
    "throttle": _throttle,
    "xid": _xid,
    "event": _event,
    "absent": _absent,
}
