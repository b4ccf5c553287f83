"""Detection: per-instance fault findings, one detector per rule kind; new incidents open, open ones escalate.

A detector sees one rule and one instance (a ``Probe``) and returns a ``Detection`` or None; condition tracks
(how long a breach has held, unbroken) advance in the group history. Kinds: metric, throttle, xid, event and
outlier (the instance's metric against its fresh InService peers' median).

A held incident (the breaker or ``max_isolated`` kept it from being admitted) whose condition then reads
clear on fresh evidence for ``RECOVERED_AFTER_S`` closes as recovered (``close_recovered``).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policies import metrics as m
from policies.isolation.shared import (
    ALSO,
    ESCALATED_BY,
    SERVING_STATES,
    UNSERVED_DETAIL,
    XID_SAME_EVENT_GAP_S,
    Tick,
    close,
    note,
    one_finding,
)
from policies.launch_verdicts import engine_load_s, never_served
from policies.model import (
    OPEN_STATES,
    PRE_ISOLATION_STATES,
    EpisodeRecord,
    GroupHistory,
    IncidentState,
    InstanceSnapshot,
    ReasonCode,
    Scalar,
    SystemEvent,
    Track,
    XidRecord,
)
from policies.observe import GroupView, fresh
from policies.spec import ACTION_SEVERITY, GroupSpec, IsolationRule

# How long a held incident's condition must read clear before it closes as recovered. Nine agents silent
# for two hours (a bad rollout) tripped the breaker; three were rebooted and the other six stayed open after
# their agents came back, held until a human reset the breaker, and a reset past the breaker's window then
# took the six, healthy by then, out of traffic to reboot them. A condition that comes back within this is
# the same fault: the incident stays as it was.
RECOVERED_AFTER_S = 600.0
# The evidence key of an event finding whose events ECS scheduled ahead: their earliest NotBefore.
NOT_BEFORE = "not_before"


@dataclass
class Detection:
    """One rule firing on one instance (the diagnoser's ``fleet.diagnose.model.Finding`` is another thing)."""

    rule: IsolationRule
    detail: str
    evidence: dict[str, Scalar]


@dataclass(frozen=True)
class Peers:
    """One metric's fresh values over the group's InService instances, read once per rule and tick (an
    outlier rule compares every instance with the others: filtering the peers per instance was quadratic)."""

    values: list[float]  # sorted
    own: dict[str, float]  # instance -> its value in ``values``

    @classmethod
    def of(cls, view: GroupView, metric: str, now: datetime, stale_after_s: float) -> Peers:
        own: dict[str, float] = {}
        for q in view.serving:
            sample = q.metrics.get(metric)
            if fresh(sample, now, stale_after_s):
                assert sample is not None
                own[q.instance_id] = sample.value
        return cls(sorted(own.values()), own)

    def without(self, instance_id: str) -> list[float]:
        """The values of every instance but this one (``values`` itself when it has none: never changed)."""
        mine = self.own.get(instance_id)
        if mine is None:
            return self.values
        rest = list(self.values)
        del rest[bisect.bisect_left(rest, mine)]
        return rest


@dataclass(frozen=True)
class Probe:
    """One instance under one rule: what a detector reads (and the track key it advances)."""

    key: str
    inst: InstanceSnapshot
    view: GroupView
    gh: GroupHistory
    now: datetime
    stale_after_s: float
    last_detected: datetime | None  # the instance's latest incident, answered XIDs before it do not count
    peers: Peers | None = None  # the rule's metric over the InService instances (outlier rules)
    load_s: float = 0.0  # how long its engine may be down loading the weights (``engine_load_s``)
    suspect: bool = False  # the instance has an open incident: its restarts are the remediation's
    # the keys whose condition a fresh sample read as not holding this tick (``close_recovered`` reads them)
    clear: set[str] = field(default_factory=set)


def _track(gh: GroupHistory, key: str, breaching: bool | None, sample_at: datetime) -> Track | None:
    """Advance a condition track by one sample; None (unknown) resets it - unbroken evidence only."""
    if not breaching:
        gh.tracks.pop(key, None)
        return None
    track = gh.tracks.get(key)
    if track is None:
        track = Track(since=sample_at, last_at=sample_at, count=1)
    elif sample_at > track.last_at:
        track = Track(since=track.since, last_at=sample_at, count=track.count + 1)
    gh.tracks[key] = track
    return track


def _record_xids(gh: GroupHistory, inst: InstanceSnapshot, now: datetime, stale_after: float) -> None:
    """Remember the instance's XID occurrences.

    ``gpu_xid`` is "the last XID code": a source may repeat it every sample while it stays the last one. The
    same code reported again within XID_SAME_EVENT_GAP_S of its previous report is therefore the same
    occurrence, not a repeat; a repeat is the code coming back after a gap, or after another code.
    """
    found = {(e.code, e.at) for e in inst.xids if e.code}
    last = inst.metrics.get(m.GPU_XID)
    if last is not None and fresh(last, now, stale_after) and int(last.value) != 0:
        found.add((int(last.value), last.at))
    mine = [x for x in gh.xids if x.instance_id == inst.instance_id]
    for code, at in sorted(found, key=lambda f: (f[1], f[0])):
        if at > now:
            continue
        if any(x.code == code and (x.at == at or (x.last_at is not None and x.last_at >= at)) for x in mine):
            continue  # already counted (the same sample seen again)
        previous = max(mine, key=lambda x: x.last_at or x.at, default=None)
        if previous is not None and previous.code == code:
            seen_until = previous.last_at or previous.at
            if timedelta(0) <= at - seen_until <= timedelta(seconds=XID_SAME_EVENT_GAP_S):
                previous.last_at = at
                continue
        record = XidRecord(instance_id=inst.instance_id, code=code, at=at, last_at=at)
        gh.xids.append(record)
        mine.append(record)


def detect(
    spec: GroupSpec,
    gh: GroupHistory,
    view: GroupView,
    now: datetime,
    suspects: set[str],
    learned_s: float,
    blind: bool = False,
    clear: set[str] | None = None,
) -> dict[str, list[Detection]]:
    """Findings per instance for the serving and standby instances; tracks advance in ``gh``.

    ``learned_s``: how long launches here take to serve (``load_time_s``), which an engine-health rule waits
    out on a launch that has not served (``engine_load_s``). ``blind`` (the group's instance list is the last
    one read): the rules that read an absence are left out, since an instance that left the group meanwhile
    falls silent too. ``clear`` receives the keys whose condition a fresh sample read as not holding (metric
    rules without ``repeat``, throttle, absent and outlier rules; the others cannot read as over)."""
    stale_after = spec.stabilization.stale_after_s
    cleared: set[str] = set() if clear is None else clear
    findings: dict[str, list[Detection]] = {}
    candidates = view.serving + [i for i in view.standby if i.instance_id in suspects]
    last_detected: dict[str, datetime] = {}
    for inc in gh.incidents:
        if inc.instance_id not in last_detected or inc.detected_at > last_detected[inc.instance_id]:
            last_detected[inc.instance_id] = inc.detected_at
    load_s: dict[str, float] = {}
    for inst in candidates:
        _record_xids(gh, inst, now, stale_after)
        load_s[inst.instance_id] = engine_load_s(gh.launches, inst, now, spec.cold_start_s, learned_s)
    for rule in spec.isolation.rules:
        if blind and rule.kind == "absent":
            continue
        detector = _DETECTORS[rule.kind]
        peers = None
        if rule.kind in _PEER_KINDS:
            assert rule.metric is not None  # both compare the instance's metric with its peers'
            peers = Peers.of(view, rule.metric, now, stale_after)
        for inst in candidates:
            key = _key(rule.rule_id, inst.instance_id)
            last = last_detected.get(inst.instance_id)
            suspect = inst.instance_id in suspects
            probe = Probe(
                key, inst, view, gh, now, stale_after, last, peers, load_s[inst.instance_id], suspect, cleared
            )
            finding = detector(rule, probe)
            if finding is not None:
                findings.setdefault(inst.instance_id, []).append(finding)
    return findings


def _key(rule_id: str, instance_id: str) -> str:
    """One rule's condition track on one instance (``GroupHistory.tracks``, ``Probe.clear``)."""
    return f"iso:{rule_id}:{instance_id}"


def _unknown(p: Probe) -> None:
    """No fresh sample: the condition's track resets (unbroken evidence only)."""
    _track(p.gh, p.key, None, p.now)


def _needed_s(rule: IsolationRule, p: Probe) -> float:
    """How long a metric rule's condition must hold. An engine-health rule (``vllm_up``) waits out a load's
    time beyond its own ``for`` (the group's cold start; on a launch that has not served, what launches here
    were seen to take: ``engine_load_s``): an engine starting (a new instance, a reboot by anyone, a stopped
    instance started again, a supervisor's restart) is down while it loads the weights, and nothing tells
    that from a dead one until a load's time has passed."""
    return rule.for_s + (p.load_s if rule.metric in m.ENGINE_HEALTH_METRICS else 0.0)


def _metric(rule: IsolationRule, p: Probe) -> Detection | None:
    assert rule.metric is not None
    sample = p.inst.metrics.get(rule.metric)
    if not fresh(sample, p.now, p.stale_after_s):
        _unknown(p)
        return None
    assert sample is not None
    if not m.plausible(rule.metric, sample.value):  # a dead sensor's 0 or 255 C: neither a breach nor a clear
        _unknown(p)
        return None
    breaching = sample.value > rule.above if rule.above is not None else sample.value < (rule.below or 0.0)
    if rule.repeat > 1:
        return _episodes(rule, p, sample.value, sample.at, breaching)
    if not breaching:
        p.clear.add(p.key)
    track = _track(p.gh, p.key, breaching, sample.at)
    if track and (track.last_at - track.since).total_seconds() >= _needed_s(rule, p):
        op = ">" if rule.above is not None else "<"
        return Detection(
            rule,
            f"{rule.metric}={sample.value:g} {op} {rule.above or rule.below:g} for "
            f"{(track.last_at - track.since).total_seconds():g}s",
            {
                "metric": rule.metric,
                "value": sample.value,
                "threshold": rule.above or rule.below,
                "since": track.since.isoformat(),
                "samples": track.count,
            },
        )
    return None


def _episodes(rule: IsolationRule, p: Probe, value: float, at: datetime, breaching: bool) -> Detection | None:
    """A metric rule with ``repeat``: the condition's episodes within the window, each counted once it has
    held ``for`` if it began within ``stale_after`` of a sample that read clear (an engine that served and
    went down; not a first load at boot, and not the restarts of the instance's own remediation). Episodes
    before the instance's latest incident were answered by it."""
    gh = p.gh
    if not breaching:
        _track(gh, p.key, False, at)
        if p.key not in gh.clear_at or at > gh.clear_at[p.key]:
            gh.clear_at[p.key] = at
        return None
    track = _track(gh, p.key, True, at)
    assert track is not None
    clear = gh.clear_at.get(p.key)
    if (
        not p.suspect
        and clear is not None
        and timedelta(0) < track.since - clear <= timedelta(seconds=p.stale_after_s)
        and (track.last_at - track.since).total_seconds() >= rule.for_s
        and not any(e.key == p.key and e.at == track.since for e in gh.episodes)
    ):
        gh.episodes.append(EpisodeRecord(key=p.key, instance_id=p.inst.instance_id, at=track.since))
    start = p.now - timedelta(seconds=rule.window_s)
    if p.last_detected is not None and p.last_detected > start:
        start = p.last_detected
    hits = [e.at for e in gh.episodes if e.key == p.key and start < e.at <= p.now]
    if len(hits) < rule.repeat:
        return None
    op = ">" if rule.above is not None else "<"
    return Detection(
        rule,
        f"{rule.metric} {op} {rule.above or rule.below:g} began {len(hits)} times within {rule.window_s:g}s",
        {
            "metric": rule.metric or "",
            "value": value,
            "threshold": rule.above or rule.below,
            "episodes": len(hits),
            "repeat": rule.repeat,
            "first": min(hits).isoformat(),
        },
    )


def _throttle(rule: IsolationRule, p: Probe) -> Detection | None:
    sample = p.inst.metrics.get(m.GPU_THROTTLE_REASONS)
    if not fresh(sample, p.now, p.stale_after_s):
        _unknown(p)
        return None
    assert sample is not None
    mask = m.throttle_mask(rule.throttle_reasons or ())
    bits = int(sample.value) & mask
    if bits == 0:
        p.clear.add(p.key)
    track = _track(p.gh, p.key, bits != 0, sample.at)
    if track and track.count >= rule.samples and (track.last_at - track.since).total_seconds() >= rule.for_s:
        names = [n for n, b in m.THROTTLE_REASON_NAMES.items() if int(b) & bits]
        return Detection(
            rule,
            f"throttled ({', '.join(names)}) for {track.count} samples",
            {
                "metric": m.GPU_THROTTLE_REASONS,
                "value": int(sample.value),
                "mask": mask,
                "samples": track.count,
                "since": track.since.isoformat(),
            },
        )
    return None


def _xid(rule: IsolationRule, p: Probe) -> Detection | None:
    window_start = p.now - timedelta(seconds=rule.window_s)
    if p.last_detected is not None and p.last_detected > window_start:
        window_start = p.last_detected  # XIDs already answered by an earlier incident do not count twice
    hits = [
        x
        for x in p.gh.xids
        if x.instance_id == p.inst.instance_id
        and x.code in (rule.xids or ())
        and x.at > window_start
        and x.at <= p.now
    ]
    if len(hits) >= rule.repeat:
        codes = sorted({x.code for x in hits})
        return Detection(
            rule,
            f"XID {', '.join(map(str, codes))} x{len(hits)} within {rule.window_s:g}s",
            {"xids": ",".join(map(str, codes)), "count": len(hits), "repeat": rule.repeat},
        )
    return None


def _event(rule: IsolationRule, p: Probe) -> Detection | None:
    active = [e for e in p.inst.events if e.active and rule.matches_event(e.code)]
    if not active:
        return None
    codes = sorted({e.code for e in active})
    evidence: dict[str, Scalar] = {"events": ",".join(codes)}
    ids = sorted({e.event_id for e in active if e.event_id})
    if ids:
        evidence["event_ids"] = ",".join(ids)
    detail = f"ECS system event {', '.join(codes)}"
    ahead = scheduled_not_before(active, p.now)
    if ahead is not None:
        evidence[NOT_BEFORE] = ahead.isoformat()
        detail += f" (Scheduled, not before {ahead:%Y-%m-%d %H:%M}Z)"
    return Detection(rule, detail, evidence)


def scheduled_not_before(events: list[SystemEvent], now: datetime) -> datetime | None:
    """The earliest NotBefore of ``events`` when every one is planned work (maintenance, an expiry: not a
    ``*Failure.*``, a fault found now whose fix ECS only scheduled) Scheduled with a NotBefore still ahead:
    what ECS does then can be waited for; None when any one is a failure, executing, inquiring or due."""
    times = [
        e.not_before
        for e in events
        if e.cycle_status == "Scheduled" and e.not_before is not None and "Failure." not in e.code
    ]
    if not times or len(times) < len(events) or min(times) <= now:
        return None
    return min(times)


def _outlier(rule: IsolationRule, p: Probe) -> Detection | None:
    """The instance's metric against the median of its fresh InService peers."""
    assert rule.metric is not None and rule.peer_factor is not None
    sample = p.inst.metrics.get(rule.metric)
    if not fresh(sample, p.now, p.stale_after_s) or p.inst.lifecycle_state not in SERVING_STATES:
        _unknown(p)
        return None
    assert sample is not None
    assert p.peers is not None  # ``detect`` reads them once per outlier rule
    peers = p.peers.without(p.inst.instance_id)
    if len(peers) < rule.min_peers:
        _unknown(p)
        return None
    median = statistics.median(peers)
    breaching = sample.value >= rule.min_value and sample.value > rule.peer_factor * median
    if not breaching:
        p.clear.add(p.key)
    track = _track(p.gh, p.key, breaching, sample.at)
    if track and (track.last_at - track.since).total_seconds() >= rule.for_s:
        return Detection(
            rule,
            f"{rule.metric}={sample.value:g} > {rule.peer_factor:g}x peers' median {median:g}",
            {
                "metric": rule.metric,
                "value": sample.value,
                "peer_median": median,
                "peers": len(peers),
                "factor": rule.peer_factor,
            },
        )
    return None


def _absent(rule: IsolationRule, p: Probe) -> Detection | None:
    """No fresh ``metric`` from the instance for ``absent_for`` while at least one peer sends its own: the
    source works and this instance's agent does not. Silence everywhere (a CloudMonitor outage, every agent
    down) is unknown, not evidence: the track starts again."""
    assert rule.metric is not None and rule.absent_for_s is not None and p.peers is not None
    sample = p.inst.metrics.get(rule.metric)
    others = [iid for iid in p.peers.own if iid != p.inst.instance_id]
    if fresh(sample, p.now, p.stale_after_s):
        p.clear.add(p.key)
        _unknown(p)
        return None
    if not others:
        _unknown(p)
        return None
    track = _track(p.gh, p.key, True, p.now)
    assert track is not None
    silent_s = (p.now - track.since).total_seconds()
    if silent_s < rule.absent_for_s:
        return None
    last = sample.at.isoformat() if sample is not None else "never"
    return Detection(
        rule,
        f"no {rule.metric} for {silent_s:g}s while {len(others)} peers report (last sample: {last})",
        {"metric": rule.metric, "silent_s": silent_s, "peers_reporting": len(others), "last_sample": last},
    )


# One detector per rule kind (IsolationRule.kind); the kinds that read the instance's peers.
_DETECTORS: dict[str, Callable[[IsolationRule, Probe], Detection | None]] = {
    "metric": _metric,
    "throttle": _throttle,
    "xid": _xid,
    "event": _event,
    "outlier": _outlier,
    "absent": _absent,
}
_PEER_KINDS = frozenset({"outlier", "absent"})


def open_or_escalate(t: Tick) -> None:
    """Open an incident per instance with findings, for its most severe one; or escalate its open incident.

    Serving instances are examined; standby ones only when they have an open incident (to escalate it).
    """
    gh, now = t.gh, t.now
    suspects = {i.instance_id for i in gh.incidents if i.state in OPEN_STATES}
    findings = (
        detect(t.spec, gh, t.view, now, suspects, t.load_s, blind=t.group.blind, clear=t.clear)
        if t.iso.enabled
        else {}
    )
    for instance_id in sorted(findings):
        found = sorted(findings[instance_id], key=lambda f: -ACTION_SEVERITY[f.rule.action])
        worst = found[0]
        t.found[instance_id] = _waits_until(found)
        inc = t.open_incident(instance_id)
        if inc is None:
            evidence = dict(worst.evidence)
            if len(found) > 1:
                evidence[ALSO] = ",".join(f.rule.rule_id for f in found[1:])
            inc = t.new_incident(
                instance_id,
                worst.rule.rule_id,
                worst.rule.kind,
                worst.rule.action,
                False,
                worst.detail,
                evidence,
                ReasonCode.RULE_BREACHED,
            )
            inst = t.by_id[instance_id]
            inc.unserved = never_served(gh.launches, inst, now, t.load_s, t.stale_after_s)
            if inc.unserved:
                note(inc, now, ReasonCode.UNSERVED_LAUNCH, UNSERVED_DETAIL)
        elif (
            ACTION_SEVERITY[worst.rule.action] > ACTION_SEVERITY[inc.action]
            and inc.state != IncidentState.REMEDIATED
        ):
            inc.action = worst.rule.action
            inc.evidence[f"{ESCALATED_BY}{worst.rule.rule_id}"] = worst.detail
            note(
                inc, now, ReasonCode.ESCALATED, f"{worst.rule.rule_id}: {worst.detail} -> {worst.rule.action}"
            )


def _waits_until(found: list[Detection]) -> datetime | None:
    """The NotBefore an instance's isolation may wait for: every finding a system event ECS scheduled
    ahead (``scheduled_not_before``); None when any finding asks for it now."""
    times = [f.evidence.get(NOT_BEFORE) for f in found]
    if not all(isinstance(at, str) for at in times):
        return None
    return min(datetime.fromisoformat(str(at)) for at in times)


def close_recovered(t: Tick) -> None:
    """Close each held automatic incident whose condition has read clear for ``RECOVERED_AFTER_S``.

    Held: open, never admitted (the breaker or ``max_isolated`` kept it waiting), so nothing was done to its
    instance. Clear: this tick's detection read the rule's condition as not holding on a fresh sample
    (``detect``'s ``clear``: a metric threshold without ``repeat``, throttling, an absent metric, an outlier
    back among its peers). XIDs and system events (the fault stays in the hardware, or ECS ends the event once
    the instance is rebooted), and an incident that more than one rule found, stay open for their handlers or
    a human, as before."""
    for inc in t.gh.incidents:
        if inc.state not in PRE_ISOLATION_STATES or inc.admitted_at is not None or inc.manual:
            continue
        inst = t.by_id.get(inc.instance_id)
        clear = (
            inst is not None
            and inst.lifecycle_state in SERVING_STATES
            and inc.incident_id not in t.released
            and one_finding(inc)
            and _key(inc.rule, inc.instance_id) in t.clear
        )
        if not clear:
            inc.clear_since = None
        elif inc.clear_since is None:
            inc.clear_since = t.now
        elif (t.now - inc.clear_since).total_seconds() >= RECOVERED_AFTER_S:
            since = inc.clear_since.isoformat()
            note(inc, t.now, ReasonCode.RECOVERED, f"{inc.rule} clear since {since}, before any action")
            close(inc, t.now, ReasonCode.RECOVERED, "recovered")
