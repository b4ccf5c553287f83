"""Gathering a diagnosis window: from the cloud (what the service observes, over a time range) or a file.

From the cloud, per group: DescribeScalingGroups (name -> id), DescribeScalingInstances, one
DescribeScalingActivities (the scale-outs), one DescribeInstances for the instance type, and per metric one
batched range read over every instance of the group through the group's metric source (CloudMonitor's
``DescribeMetricList`` by default: the CMS adapter packs up to 50 instances per call), plus the agent's
diagnosis-only custom metrics; the service store's recent decisions when a store is given. API calls grow
with metrics, not with instances. A read that fails is recorded in ``Window.errors`` and its metric left out:
the analysis reports what is missing rather than failing.

From a file: the snapshot JSON of :mod:`fleet.diagnose.model` (docs/diagnose.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fleet.cloud import permissions
from fleet.cloud.errors import AuthError, CloudError
from fleet.cloud.types import MetricPoint
from fleet.diagnose.model import (
    EXTRA_METRICS,
    GroupContext,
    InstanceWindow,
    Series,
    SnapshotError,
    Window,
    windows_from_json,
)
from fleet.diagnose.rules import parse_scale_out
from policies import metrics as pm
from policies.model import LifecycleState

log = logging.getLogger(__name__)

_UNMEASURED_STATES = frozenset(
    {LifecycleState.STOPPED, LifecycleState.REMOVING, LifecycleState.REMOVING_WAIT}
)


class ReadError(Exception):
    """The group itself could not be read (not found, or ESS unreachable); one line."""


def context_for(
    spec: Any, *, model: str | None = None, instance_type: str | None = None, region: str | None = None
) -> GroupContext:
    """The group's context from its fleet.yaml spec: sizes, cold start and SLOs, the ones its predictive
    section declares (``ttft_p99_ms``, ``tpot_p99_ms``: what the policy sizes for), else the tightest of
    its scale-out rules' thresholds on the same metric. vLLM's ``max_num_seqs`` and ``max_num_batched_tokens``
    are the predictive section's, when it sets them (``fleet diagnose``'s flags override them). The model,
    unless given, is the group's ``model``, else the predictive section's (what its capacity model sizes); the
    instance type, unless given, is read from ECS (``read_window``): a fallback rung may run another type."""
    ttft = tpot = None
    for rule in getattr(spec, "scale_out", ()):
        if rule.above is None:
            continue
        if rule.metric == pm.TTFT_P99_MS:
            ttft = float(rule.above) if ttft is None else min(ttft, float(rule.above))
        elif rule.metric == pm.TPOT_P99_MS:
            tpot = float(rule.above) if tpot is None else min(tpot, float(rule.above))
    pred = getattr(spec, "predictive", None)
    if pred is not None:
        ttft = ttft if pred.ttft_p99_ms is None else float(pred.ttft_p99_ms)
        tpot = tpot if pred.tpot_p99_ms is None else float(pred.tpot_p99_ms)
    seqs = getattr(pred, "max_num_seqs", None)
    budget = getattr(pred, "max_num_batched_tokens", None)
    return GroupContext(
        name=spec.name,
        cold_start_s=float(spec.cold_start_s),
        slo_ttft_p99_ms=ttft,
        slo_tpot_p99_ms=tpot,
        model=model or getattr(spec, "model", None) or getattr(pred, "model", None),
        instance_type=instance_type or getattr(spec, "instance_type", None),
        min_size=spec.min_size,
        max_size=spec.max_size,
        warm_floor=spec.warm_floor,
        region=region,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
    )


def combine_points(canonical: str, points: Iterable[MetricPoint]) -> dict[str, list[tuple[datetime, float]]]:
    """Per instance, one value per timestamp: per-GPU rows reduced as the service does (throttle reasons
    OR-ed, the SM clock ratio the slowest GPU's, the rest the highest)."""
    by: dict[str, dict[datetime, float]] = {}
    for p in points:
        if p.instance_id is None or p.value is None:
            continue
        slot = by.setdefault(p.instance_id, {})
        v = float(p.value)
        if p.timestamp in slot:
            old = slot[p.timestamp]
            if canonical == pm.GPU_THROTTLE_REASONS:
                v = float(int(old) | int(v))
            else:  # tensor-parallel ranks run in lock step: the slowest clock is the instance's
                v = min(old, v) if canonical == pm.GPU_SM_CLOCK_RATIO else max(old, v)
        slot[p.timestamp] = v
    return {iid: sorted(series.items()) for iid, series in by.items()}


def read_window(
    clients: Any,
    spec: Any,
    *,
    start: datetime,
    end: datetime,
    period_s: int = 15,
    store: Any = None,
    context: GroupContext | None = None,
) -> Window:
    """The window of ``spec``'s group over ``[start, end]`` read through the SDK adapters."""
    from fleet.service.sources import source_for

    ctx = context or context_for(spec)
    errors: list[str] = []
    gid, instances = _group_instances(clients.ess, spec)
    scale_outs = _scale_outs(clients.ess, gid, start - timedelta(seconds=ctx.cold_start_s), end, errors)
    measured = [i for i in instances if i.lifecycle_state not in _UNMEASURED_STATES]
    ids = [i.instance_id for i in measured]
    if ctx.instance_type is None and ids:
        try:
            infos = clients.ecs.describe_instances(ids[:1])
            if infos and infos[0].instance_type:
                ctx.instance_type = infos[0].instance_type
        except CloudError as exc:
            errors.append(_read_error(exc, "DescribeInstances"))
    windows = {
        i.instance_id: InstanceWindow(i.instance_id, i.lifecycle_state, i.created_at) for i in measured
    }
    source = source_for(spec, clients)
    if ids:
        _read_metrics(source, clients, windows, ids, start, end, period_s, errors)
    decisions = _decisions(store, spec.name, start, errors) if store is not None else []
    ctx.publish_period_s = float(period_s) if period_s > ctx.publish_period_s else ctx.publish_period_s
    return Window(
        group=ctx,
        start=start,
        end=end,
        instances=list(windows.values()),
        scale_outs=scale_outs,
        decisions=decisions,
        errors=errors,
        source=getattr(source, "kind", "cloud"),
    )


def _read_error(exc: CloudError, what: str) -> str:
    """`<code>: <what was read>`; a RAM denial adds the permission to grant and the policy holding it."""
    if isinstance(exc, AuthError) and exc.denied:
        needed = exc.permission or ""
        product, _, action = needed.partition(":")
        return f"{exc.code}: {what} ({permissions.denial_hint(product or exc.product, action or exc.action)})"
    return f"{exc.code}: {what}"


def _group_instances(ess: Any, spec: Any) -> tuple[str, list[Any]]:
    """The group's id (by name when the config gives none) and its instances; ReadError if unreadable."""
    gid = getattr(spec, "scaling_group_id", None)
    try:
        if not gid:
            name = getattr(spec, "scaling_group_name", None) or spec.name
            found = ess.describe_scaling_groups(names=[name])
            if not found:
                raise ReadError(f"group {spec.name}: no scaling group named {name!r} in the region")
            gid = found[0].group_id
        return gid, ess.describe_scaling_instances(gid)
    except CloudError as exc:
        raise ReadError(f"group {spec.name}: cannot read the scaling group: {exc}") from None


def _scale_outs(
    ess: Any, gid: str, since: datetime, end: datetime, errors: list[str]
) -> list[tuple[datetime, int, int]]:
    """Scale-outs started in ``[since, end]`` as (when, from, to), oldest first."""
    scale_outs: list[tuple[datetime, int, int]] = []
    try:
        for a in ess.describe_scaling_activities(gid, limit=50):
            when = a.start_time
            change = parse_scale_out(a.cause)
            if change and when is not None and since <= when <= end:
                scale_outs.append((when, change[0], change[1]))
    except CloudError as exc:
        errors.append(_read_error(exc, "DescribeScalingActivities"))
    scale_outs.sort()
    return scale_outs


def _read_metrics(
    source: Any,
    clients: Any,
    windows: dict[str, InstanceWindow],
    ids: list[str],
    start: datetime,
    end: datetime,
    period_s: int,
    errors: list[str],
) -> None:
    """Every instance metric from the group's source, and the diagnosis-only ones from CloudMonitor."""
    for canonical in sorted(pm.INSTANCE_METRICS):
        try:
            points = source.read_range(canonical, ids, start, end, step_s=period_s)
        except CloudError as exc:
            errors.append(_read_error(exc, source.describe(canonical)))
            continue
        _merge(windows, canonical, combine_points(canonical, points))
    if getattr(source, "kind", "") == "cloudmonitor":
        cms = clients.cms
        for canonical, name in EXTRA_METRICS.items():
            try:
                points = cms.metric_list(cms.custom_namespace, name, ids, start, end, period_s=period_s)
            except CloudError as exc:
                errors.append(_read_error(exc, name))
                continue
            _merge(windows, canonical, combine_points(canonical, points))


def _merge(windows: dict[str, InstanceWindow], canonical: str, by_instance: dict[str, Series]) -> None:
    for iid, series in by_instance.items():
        if iid in windows:
            windows[iid].metrics[canonical] = series


def _decisions(store: Any, group: str, start: datetime, errors: list[str]) -> list[dict[str, Any]]:
    """The service's decisions for the group since ``start`` (context; a store failure is reported)."""
    decisions: list[dict[str, Any]] = []
    try:
        for d in store.decisions(since=start, group=group, limit=50):
            decisions.append(
                {
                    "at": d.at,
                    "kind": d.kind,
                    "action": d.action,
                    "outcome": d.outcome,
                    "target": d.target,
                    "instance_id": d.instance_id,
                    "reason": d.reason,
                }
            )
    except Exception as exc:  # noqa: BLE001 - the store is optional context; its failure is reported
        errors.append(f"store: {exc}")
    return decisions


def load_snapshot(path: Path) -> list[Window]:
    """The windows of a snapshot file; :class:`SnapshotError` names the file and field on bad input."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SnapshotError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    try:
        return windows_from_json(data, where=path.name)
    except (TypeError, ValueError, OverflowError) as exc:
        # "file.json.group.x: reason" -> "path/file.json: group.x: reason" (the file named once, as given)
        message = str(exc)
        for prefix in (f"{path.name}.", f"{path.name}: "):
            if message.startswith(prefix):
                message = message[len(prefix) :]
                break
        raise SnapshotError(f"{path}: {message}") from None
