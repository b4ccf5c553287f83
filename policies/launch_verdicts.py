"""What the launches' verdicts say, read by scaling (no scale-out onto launches that keep failing) and by
isolation (an incident on a launch that never served takes no serving capacity out).

The verdicts themselves are written once per launch by ``policies/scaling/launches.py`` (``judge``); this
module only reads ``GroupHistory.launches``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from policies import metrics as m
from policies.model import GroupHistory, InstanceSnapshot, LaunchRecord
from policies.observe import GroupView, fresh

LAUNCH_GRACE_S = 300.0  # past the cold start: a slow download or a long first compile is not a failure
JUDGE_WINDOW_S = 1800.0  # launches not judged within this after the grace are left alone
FAILED_IN_A_ROW = 2  # one dead instance is a bad host; two in a row with none serving between is the launch
REMOVE_AFTER_S = 600.0  # a failed launch of a failing run still down this long after its verdict is removed
# a launch that served only after its failed verdict marks the group's launches as slow this long
SLOW_WARN_S = 3600.0
LEARN_FROM = 3  # the launches that served last tell how long a launch here takes
IDLE_GPU_PCT = 10.0  # GPU utilization under which a node whose vLLM reads down is taken as serving nothing


def slowest_launch(launches: list[LaunchRecord], cold_start_s: float) -> LaunchRecord | None:
    """The slowest of the last ``LEARN_FROM`` launches that served and were seen loading past the cold start
    and the grace (``LaunchRecord.shows_slow``); None when none of them was (launches here load within the
    cold start as configured, or nothing shows otherwise), or when it took no longer than the cold start and
    the grace configured now (``cold_start_s`` raised to what launches take)."""
    served = [r for r in launches if r.load_s is not None][-LEARN_FROM:]
    slowest = max(
        (r for r in served if r.shows_slow), key=lambda r: (r.load_s or 0.0, r.instance_id), default=None
    )
    if slowest is None or (slowest.load_s or 0.0) <= cold_start_s + LAUNCH_GRACE_S:
        return None
    return slowest


def load_time_s(launches: list[LaunchRecord], cold_start_s: float) -> float:
    """How long the service waits for a launch to serve here: ``cold_start_s``, unless recent launches took
    longer than it and the grace (``slowest_launch``: the value set too short, or the model store slowed
    down); then what the slowest of them took, at most ``JUDGE_WINDOW_S`` past the cold start. Launches are
    judged by it, a launch's loading engine is left alone as long (``engine_load_s``), and the health check
    after a reboot waits for it (a node out of traffic waiting a little long costs less than a replacement
    ordered while it still loads). It changes only once a launch served past its failed verdict
    (``late_at``), so the first slow launch still reads as failed; three launches within the cold start and
    the grace restore it. (The forecast's horizon keeps ``cold_start_s``: looking further ahead held 4-9 %
    more GPU-hours in the simulator for no SLO-violation minute.)"""
    return learned_load_s(slowest_launch(launches, cold_start_s), cold_start_s)


def learned_load_s(slowest: LaunchRecord | None, cold_start_s: float) -> float:
    """``load_time_s`` from its ``slowest_launch`` (already found)."""
    if slowest is None or slowest.load_s is None:
        return cold_start_s
    return min(slowest.load_s, cold_start_s + JUDGE_WINDOW_S)


def failed_run(launches: list[LaunchRecord]) -> list[LaunchRecord]:
    """The run of failed launches behind the newest verdicts, oldest first; empty unless at least
    ``FAILED_IN_A_ROW`` failed with none serving after them (launches are fine)."""
    run: list[LaunchRecord] = []
    for record in reversed(launches):
        if record.served:
            break
        run.insert(0, record)
    return run if len(run) >= FAILED_IN_A_ROW else []


def engine_load_s(
    launches: list[LaunchRecord], inst: InstanceSnapshot, now: datetime, cold_start_s: float, load_s: float
) -> float:
    """How long an engine found down on ``inst`` may still be loading its weights: the launches' learned
    time (``load_s``, from ``load_time_s``) while ``inst`` is a launch that has not served yet (its weights
    come the way every launch's do); ``cold_start_s`` on a node that has served (an engine restarted there, by
    its supervisor or a reboot, reads them back from its own disk, not from the slow store a launch waits
    on)."""
    if load_s <= cold_start_s:
        return cold_start_s
    record = verdict(launches, inst.instance_id)
    if record is not None:
        return cold_start_s if record.served else load_s
    return load_s if launch_age_s(inst, now, load_s) is not None else cold_start_s


def late_launch(launches: list[LaunchRecord], now: datetime) -> LaunchRecord | None:
    """The newest launch judged failed that served after all within ``SLOW_WARN_S``: launches here take
    longer than the group's ``cold_start_s`` (None: none did)."""
    since = now - timedelta(seconds=SLOW_WARN_S)
    late = [r for r in launches if r.late_at is not None and r.late_at > since]
    return max(late, key=lambda r: (r.late_at or now, r.instance_id)) if late else None


def dead_launches(gh: GroupHistory, view: GroupView, now: datetime) -> list[str]:
    """The run's failed launches still InService ``REMOVE_AFTER_S`` after their verdict, oldest first, but
    its newest: while launches keep failing they serve nothing and no replacement of theirs would (none when
    launches are fine). The wait spares a launch that was only slow to load (a ``cold_start_s`` set too
    short); the newest is kept to tell the two apart however slow the load (one that serves after its
    verdict is recorded as late and ends the run, where removing every one would stop the group from ever
    growing), and for a human to look into."""
    serving = {i.instance_id for i in view.serving}
    due = now - timedelta(seconds=REMOVE_AFTER_S)
    return [
        r.instance_id for r in failed_run(gh.launches)[:-1] if r.instance_id in serving and r.judged_at <= due
    ]


def verdict(launches: list[LaunchRecord], instance_id: str) -> LaunchRecord | None:
    """The instance's launch verdict, if it was judged."""
    return next((r for r in launches if r.instance_id == instance_id), None)


def judged_by(inst: InstanceSnapshot, load_s: float) -> datetime | None:
    """When a launch's verdict is due at the latest (it may come sooner: served at its first fresh reading of
    the engine up); None when the instance's launch time is unknown."""
    if inst.created_at is None:
        return None
    return inst.created_at + timedelta(seconds=load_s + LAUNCH_GRACE_S)


def engine_up(inst: InstanceSnapshot, now: datetime, stale_after_s: float) -> bool | None:
    """The instance's engine on a fresh ``vllm_up`` sample: up, down, or None (no fresh sample)."""
    up = inst.metrics.get(m.VLLM_UP)
    if up is None or not fresh(up, now, stale_after_s):
        return None
    return up.value >= m.ENGINE_DOWN_BELOW


def serves_nothing(inst: InstanceSnapshot, now: datetime, stale_after_s: float) -> bool:
    """Whether ``inst`` serves nothing now: its agent reads vLLM down on a fresh sample and reports no fresh
    request rate (crashed, lost with its GPU to a hardware XID, or still loading), as the demand counts it,
    and CloudMonitor's own agent, which ours does not feed, reads its GPUs idle (under ``IDLE_GPU_PCT``). The
    second reading guards against a fault of our agent alone (a wrong vLLM address pushed to every node
    reads every engine down, and each taken out of traffic as serving nothing would empty the fleet); a hung
    engine, its GPUs spinning, is not taken as serving nothing either. Taking such a node out of traffic
    takes no serving capacity out."""
    rate = inst.metrics.get(m.REQUEST_RATE)
    util = inst.metrics.get(m.GPU_UTIL_PCT)
    return (
        engine_up(inst, now, stale_after_s) is False
        and (rate is None or not fresh(rate, now, stale_after_s))
        and util is not None
        and fresh(util, now, stale_after_s)
        and util.value < IDLE_GPU_PCT
    )


def launch_age_s(inst: InstanceSnapshot, now: datetime, load_s: float) -> float | None:
    """How long ago ``inst`` was launched, while it is young enough to be judged as a launch; None when its
    launch time is unknown or it is older than the load time (``load_time_s``), the grace and
    ``JUDGE_WINDOW_S`` (the engine rules' business, not a launch's)."""
    if inst.created_at is None:
        return None
    age_s = (now - inst.created_at).total_seconds()
    return age_s if age_s <= load_s + LAUNCH_GRACE_S + JUDGE_WINDOW_S else None


def never_served(
    launches: list[LaunchRecord],
    inst: InstanceSnapshot,
    now: datetime,
    load_s: float,
    stale_after_s: float,
) -> bool:
    """Whether ``inst`` is a launch that has not served yet: judged failed, or young enough to be judged, not
    judged served, and its engine reading down on a fresh sample. An instance the service never judged (older
    than the judging window when first seen, or in a group without the engine metric) counts as serving."""
    record = verdict(launches, inst.instance_id)
    if record is not None:
        return not record.served
    return launch_age_s(inst, now, load_s) is not None and engine_up(inst, now, stale_after_s) is False
