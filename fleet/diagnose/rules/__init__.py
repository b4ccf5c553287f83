"""The analysis core: a metrics window in, findings out, most important first. Pure: no I/O, no clock.

Each rule looks for one cause of high latency in the window and, when it finds it, says where (the group or
the instances), on what evidence, why in plain words, and what to change, with numbers from the sizing model
where it has them (:mod:`fleet.diagnose.fixes`). Rules read the canonical policy metrics
(``policies.metrics``) and the agent's diagnosis-only extras (:data:`fleet.diagnose.model.EXTRA_METRICS`).

Root causes before symptoms. Several causes show the same symptoms (a queue, a high P99), so the rules run in
an order and later ones skip what an earlier one explains:

1. ``gpu_xid_error``, then ``thermal_throttling`` / ``power_throttling`` (skipping a node an XID explains), on
   every serving instance's samples: a broken or throttled node is slow; ``node_outlier`` does not repeat it.
2. ``metrics_missing``: an instance without the agent's metrics is left out of every later rule; one whose
   agent stopped after a node fault began is reported in that fault's finding instead.
3. ``cold_start``: the backlog while new instances load is theirs; queue rules look only after they are up.
4. ``kv_cache_pressure``: a batch held small by a full KV cache queues requests; when it does, the queue is
   reported as KV pressure (its fix sizes the instances too), not as ``queue_backlog`` or
   ``undersized_fleet``.
5. ``undersized_fleet``: load above what the fleet serves, sustained (the queue keeps growing or sits at the
   gateway's limit); else ``queue_backlog``: saturated GPUs with a standing queue at a load the fleet can
   carry on average ("falsely busy": the GPU looks full, the latency is waiting time).
6. ``memory_bandwidth_bound``, ``node_outlier``.
7. ``slo_violated_unexplained``: P99 TTFT or TPOT over its SLO in most samples and none of the above explains
   it: the time goes where these metrics do not look (prompt length, API server, network).

Thresholds name their source next to them; they are module constants so tests and docs can quote them.

Where: ``nodes.py`` (metrics missing, XID errors, throttling, memory bandwidth, node outliers), ``load.py``
(cold start, KV cache pressure, undersized fleet and queue backlog), ``shared.py`` (the thresholds, the
``_State`` earlier rules leave for later ones, small statistics). This module runs them in order.
"""

from __future__ import annotations

import math
from dataclasses import replace

from fleet.diagnose.model import SERVING_STATES, Finding, Window
from fleet.diagnose.rules.load import _cold_start, _kv_pressure, _queue_and_capacity
from fleet.diagnose.rules.nodes import (
    _agent_coverage,
    _bandwidth,
    _metrics_missing,
    _outliers,
    _throttling,
    _xid_errors,
)
from fleet.diagnose.rules.shared import (
    _SEVERITY_RANK,
    DEFAULT_SLO_TTFT_MS,
    KIND_ORDER,
    KINDS,
    _State,
    parse_scale_out,
)
from fleet.diagnose.rules.slo import _slo_unexplained

__all__ = ["KINDS", "diagnose", "parse_scale_out"]


def diagnose(window: Window, instance: str | None = None) -> list[Finding]:
    """Findings for one group's window, most important first; ``instance`` keeps those that concern it."""
    w = _finite(window)
    serving = [i for i in w.instances if i.state in SERVING_STATES]
    findings: list[Finding] = []
    coverage = _agent_coverage(w, serving)
    st = _State(
        w,
        serving,
        coverage.measured,
        agent_stopped={**coverage.stopped, **dict.fromkeys(coverage.no_agent)},
        slo_ttft_ms=w.group.slo_ttft_p99_ms or DEFAULT_SLO_TTFT_MS,
    )
    findings.extend(_xid_errors(st))
    findings.extend(_throttling(st))
    # after the node rules: an agent that stopped after a node fault is that fault's consequence
    findings.extend(_metrics_missing(st, coverage))
    for rule in (
        _cold_start,
        _kv_pressure,
        _queue_and_capacity,
        _bandwidth,
        _outliers,
    ):
        findings.extend(rule(st))
    findings.extend(_slo_unexplained(st, findings))  # last: what no rule above explains
    for f in findings:
        f.group = w.group.name
        f.fix = f.fix[:1].upper() + f.fix[1:]
    if instance is not None:
        findings = [f for f in findings if instance in f.scope or f.scope == [w.group.name]]
    findings.sort(key=lambda f: (_SEVERITY_RANK.get(f.severity, 9), _kind_rank(f.kind)))
    return findings


def _finite(w: Window) -> Window:
    """The window without NaN or infinite samples (a value that is not a number is a missing one)."""
    instances = [
        replace(i, metrics={m: [(t, v) for t, v in s if math.isfinite(v)] for m, s in i.metrics.items()})
        for i in w.instances
    ]
    return replace(w, instances=instances)


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
