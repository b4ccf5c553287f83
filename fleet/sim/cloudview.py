"""The runner's glue to the fake cloud and the controllers: group set-up, state reads, incidents, counts.

The world lives *inside* the fake cloud, so it reads the fake's backend state directly (which instances the
group has, their lifecycle, whether ECS is restarting one) instead of paying an SDK call per look; the
controllers see the cloud only through the SDK adapters, exactly as in production.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from fleet.sim.baselines import EssAlarmRule, StaticPeak, TargetTracking
from fleet.sim.invariants import InvariantChecker
from fleet.sim.types import Hardware, MinutePoint, SimOptions
from fleet.sim.world import NODE_FAULT_KINDS, World, injected
from fleet.timefmt import parse_iso
from policies.isolation.sla import isolate_breached, respond_breached

if TYPE_CHECKING:
    from fleet.cloud.clients import CloudClients
    from fleet.config import FleetConfig, GroupConfig
    from fleet.testing import ManualClock
    from fleet.testing.cloud import FakeCloud
    from policies.spec import GroupSpec

# ECS statuses during which the instance is not running its software (a reboot or a start in progress).
_RESTARTING = ("Stopping", "Starting", "Stopped")


def initial_size(spec: GroupSpec, at: datetime) -> int:
    """The group's floor when the run starts (schedules and the warm floor included)."""
    from policies.schedule import bounds

    return bounds(spec, at).floor


def create_group(
    cloud: FakeCloud,
    spec: GroupConfig,
    hardware: Hardware,
    initial: int,
    *,
    region: str,
    max_size: int,
    setup: Callable[[FakeCloud, str], None] | None = None,
) -> str:
    """The scaling group of ``spec`` in the fake, with ``initial`` instances already InService; ``setup`` (the
    group's spot mix and economical mode, ``SimOptions.group_setup``) is applied before they are launched, so
    that a spot group's start fleet holds its spot instances as its scale-outs do."""
    return cloud.create_group_for_tests(
        name=spec.scaling_group_name or spec.name,
        min_size=min(spec.min_size, initial),
        max_size=max_size,
        desired_capacity=initial,
        instance_type=hardware.instance_type,
        region_id=region,
        in_service=initial,
        default_cooldown_s=300,
        setup=None if setup is None else lambda group_id: setup(cloud, group_id),
    )


def bind_group(config: FleetConfig, index: int, group_id: str) -> FleetConfig:
    """The config with group ``index`` pointing at the fake's group id."""
    groups = list(config.groups)
    groups[index] = groups[index].model_copy(
        update={"scaling_group_id": group_id, "scaling_group_name": None}
    )
    return config.model_copy(update={"groups": type(config.groups)(groups)})


def list_group_instances(cloud: FakeCloud, group_id: str) -> dict[str, str]:
    """Instance id -> ESS lifecycle state, ``Rebooting`` while ECS restarts the instance, ``Stopped`` from
    the moment economical mode's scale-in stops it."""
    group = cloud.ess.groups.get(group_id)
    if group is None:
        return {}
    out: dict[str, str] = {}
    ecs = cloud.ecs.instances
    for iid in group.instance_ids:
        inst = cloud.ess.instances.get(iid)
        if inst is None:
            continue
        state = inst.lifecycle_state
        ecs_inst = ecs.get(iid)
        if (
            ecs_inst is not None
            and ecs_inst.status in _RESTARTING
            and state not in ("Pending", "Pending:Wait")
        ):
            # Economical mode's scale-in stops the member (it stays in the group); anything else restarts it.
            state = "Stopped" if state == "Stopped" or inst.awaiting_stop else "Rebooting"
        out[iid] = state
    return out


def _sim_credential() -> Any:
    from alibabacloud_credentials import models as credential_models
    from alibabacloud_credentials.client import Client as CredentialClient

    # The fake ignores signatures; the SDK only needs something to sign with.
    return CredentialClient(
        credential_models.Config(type="access_key", access_key_id="fleet-sim", access_key_secret="fleet-sim")
    )  # noqa: S106


def make_clients(config: FleetConfig) -> CloudClients:
    from fleet.cloud.clients import make_clients as _make
    from fleet.cloud.retry import RetryPolicy

    # str(): CmsAdapter's own conversion, so an unset account id reads as it always has
    account_id = str(config.account_id)
    return _make(
        config.region, account_id, credential=_sim_credential(), retry=_sim_retry(RetryPolicy), env={}
    )


def _sim_retry(policy_cls: Any) -> Any:
    # Virtual time must not sleep on the wall clock: retries (the fake never throttles here) wait zero.
    try:
        return policy_cls(sleep=lambda _s: None)
    except TypeError:
        return policy_cls()


def service_settings(config: FleetConfig, tick_s: float | None = None) -> Any:
    """Our service's settings in a simulation: the config's, observing inline (no threads) and unthrottled,
    with a lease that outlives the simulation's tick (``tick_s``, 60 s by default where the config's is 15).

    The in-process fake has no request budget and no wall time passes inside a tick: the pools' wall-clock
    token bucket would only sleep, and did, for more than half of a simulated day's wall time. The lease is
    the config's, at least two ticks long as in production (``ServiceSettings.from_config``): sized for the
    config's 15 s tick, it lapsed between the simulation's 60 s ticks, and every tick took it again under a
    new epoch, as a replica taking over from another does.
    """
    from dataclasses import replace

    from fleet.service.settings import ServiceSettings

    settings = ServiceSettings.from_config(config)
    ttl_s = settings.lease_ttl_s if tick_s is None else max(settings.lease_ttl_s, 2 * tick_s + 1.0)
    return replace(settings, observe_workers=1, call_rate_limit=False, lease_ttl_s=ttl_s)


def make_controller(
    options: SimOptions,
    config: FleetConfig,
    spec: GroupConfig,
    cloud: FakeCloud,
    clock: ManualClock,
    group_id: str,
) -> tuple[Any, InvariantChecker]:
    """The controller for ``options.policy`` and the invariant checker that fits it."""
    clients = make_clients(config)
    policy = options.policy
    if policy == "ours":
        from fleet.service import build_service
        from fleet.service.notify import Notifier

        # A simulation never notifies anyone: the config's DingTalk / webhook channels are real endpoints.
        service = build_service(
            config,
            clients,
            database_url="sqlite://",
            clock=clock.now,
            dry_run=False,
            notifier=Notifier([]),
            settings=service_settings(config, options.tick_s),
        )
        checker = InvariantChecker(
            min_size=spec.min_size,
            max_size=spec.max_size,
            warm_floor=spec.warm_floor,
            floor_at=_schedule_floor(spec, options.tick_s),
            max_isolated_for=spec.guardrails.max_isolated_for,
        )
        return service, checker
    if policy == "static-peak":
        size = options.static_size or spec.max_size
        return StaticPeak(clients.ess, group_id, size), InvariantChecker(min_size=size, max_size=size)
    if policy == "ess-alarm":
        ctl = EssAlarmRule(clients.ess, clients.cms, group_id, spec.min_size, spec.max_size)
        return ctl, InvariantChecker(min_size=spec.min_size, max_size=spec.max_size)
    if policy == "target-tracking":
        tracking = TargetTracking(
            clients.ess, clients.cms, group_id, spec.min_size, spec.max_size, target=options.queue_target
        )
        return tracking, InvariantChecker(min_size=spec.min_size, max_size=spec.max_size)
    if policy in _BASELINE_MAKERS:
        return _BASELINE_MAKERS[policy](options, spec, clients, group_id)
    raise ValueError(f"unknown policy {policy!r}")


def _make_kpa(options: SimOptions, spec: GroupConfig, clients: CloudClients, group_id: str) -> Any:
    from fleet.sim.kpa import Kpa

    if options.kpa_target is None:
        raise ValueError("the kpa policy needs its target concurrency (SimOptions.kpa_target)")
    ctl = Kpa(clients.ess, clients.cms, group_id, spec.min_size, spec.max_size, target=options.kpa_target)
    return ctl, InvariantChecker(min_size=spec.min_size, max_size=spec.max_size)


def _make_oracle(options: SimOptions, spec: GroupConfig, clients: CloudClients, group_id: str) -> Any:
    from fleet.sim.oracle import Oracle, lead_s

    ctl = Oracle(
        clients.ess,
        group_id,
        options.oracle_need,
        start=options.start,
        lead_s=lead_s(float(spec.cold_start_s), sync_s=options.sync_s),
        min_size=spec.min_size,
        max_size=spec.max_size,
    )
    return ctl, InvariantChecker(min_size=spec.min_size, max_size=spec.max_size)


_BASELINE_MAKERS: dict[str, Callable[[SimOptions, GroupConfig, CloudClients, str], Any]] = {
    "kpa": _make_kpa,
    "oracle": _make_oracle,
}


def _schedule_floor(spec: GroupSpec, tick_s: float) -> Callable[[datetime], int]:
    from policies.schedule import bounds

    # A floor must hold by the tick after it takes effect: the write happens in the tick that sees it, and an
    # ESS activity already in progress can hold it back one tick.
    grace = timedelta(seconds=2 * tick_s)

    def floor_at(at: datetime) -> int:
        return min(bounds(spec, at).floor, bounds(spec, at - grace).floor)

    return floor_at


def check(
    checker: InvariantChecker, world: World, cloud: FakeCloud, group_id: str, at: datetime, since_s: float
) -> None:
    """Run the invariants on the group's state after a tick."""
    group = cloud.ess.groups[group_id]
    states = {
        iid: cloud.ess.instances[iid].lifecycle_state
        for iid in group.instance_ids
        if iid in cloud.ess.instances
    }
    desired = group.desired_capacity if group.desired_capacity is not None else len(states)
    fresh = capacity_writes(cloud, group_id, since_s)
    if checker.max_isolated_for is not None:
        checker.max_isolated = checker.max_isolated_for(max(1, desired))
    # launched broken, or dead as they went out: the guardrail's count of isolated serving capacity omits them
    checker.check(at, desired, states, fresh, never_served=world.served_nothing(states))


def minute_point(world: World, cloud: FakeCloud, group_id: str, minute: int, start: datetime) -> MinutePoint:
    group = cloud.ess.groups[group_id]
    counts: dict[str, int] = {}
    for iid in group.instance_ids:
        inst = cloud.ess.instances.get(iid)
        if inst is not None:
            counts[inst.lifecycle_state] = counts.get(inst.lifecycle_state, 0) + 1
    temps = [max(g.temperature_c for g in i.gpus) for i in world.instances.values()]
    utils = [i.util for i in world.instances.values() if i.serving(world.now_s)]
    return MinutePoint(
        minute=minute,
        at=(start + timedelta(minutes=minute)).isoformat(),
        arrivals=0,
        completed=0,
        rejected=0,
        ttft_p99_ms=None,
        desired=int(
            group.desired_capacity if group.desired_capacity is not None else len(group.instance_ids)
        ),
        in_service=counts.get("InService", 0) + counts.get("Protected", 0),
        serving=world.serving_count(),
        pending=counts.get("Pending", 0) + counts.get("Pending:Wait", 0),
        standby=counts.get("Standby", 0),
        temperature_max_c=round(max(temps), 1) if temps else 0.0,
        gpu_util_avg_pct=round(100.0 * sum(utils) / len(utils), 1) if utils else 0.0,
        billed=len(world.instances) + len(world.draining),
    )


def capacity_writes(cloud: FakeCloud, group_id: str, since_s: float) -> list[str]:
    """The ESS capacity-change activities the controller started through the API since ``since_s``: moves
    in and out of Standby change no capacity and are not counted."""
    return [
        a.activity_id
        for a in cloud.ess.activities.values()
        if a.group_id == group_id
        and a.start_s >= since_s
        and a.activity_type == "CapacityChange"
        and not a.standby_move
        and a.trigger_source_type == "APIs"
        and a.total_capacity is not None
    ]


def scale_actions(
    cloud: FakeCloud, group_id: str, since_s: float, prewarm: frozenset[str] = frozenset()
) -> int:
    """Capacity writes the controller made: ESS capacity-change activities it started through the API, less
    ``prewarm`` (the creation of the start fleet, at the run's first instant, is nobody's decision)."""
    return len([a for a in capacity_writes(cloud, group_id, since_s) if a not in prewarm])


def _iso(dt: Any) -> str | None:
    if dt is None:
        return None
    return dt.isoformat() if hasattr(dt, "isoformat") else str(dt)


_RESPONSE_FIELDS = (
    "acknowledged_at",
    "admitted_at",
    "surge_requested_at",
    "capacity_protected_at",
    "standby_requested_at",
    "reboot_requested_at",
    "remove_requested_at",
)


def incidents(controller: Any, world: World, options: SimOptions, spec: GroupSpec) -> list[dict[str, Any]]:
    """The run's incidents: our service's own records for ``ours``; for the baselines, which do not isolate,
    each injected fault as an incident nobody responded to."""
    out: list[dict[str, Any]] = []
    end = options.start + timedelta(hours=options.hours)
    respond = timedelta(seconds=float(spec.isolation.respond_within_s))
    isolate = timedelta(seconds=float(spec.isolation.isolate_within_s))
    if options.policy == "ours":
        for rec in sorted(controller.store.incidents(), key=lambda r: r.detected_at):
            body = rec.body or {}
            responses = [_dt(body.get(k)) for k in _RESPONSE_FIELDS]
            responded = min((r for r in responses if r is not None), default=None)
            isolated = rec.isolated_at or _dt(body.get("isolated_at"))
            remediated = _dt(body.get("remediated_at"))
            # the SLA report's rule: one closed before its respond deadline needed no response
            respond_by = rec.respond_by or rec.detected_at + respond
            late_response = respond_breached(respond_by, responded, rec.closed_at, end)
            isolate_by = rec.isolate_by or rec.detected_at + isolate
            late_isolation = isolate_breached(isolate_by, isolated or remediated, rec.closed_at, end)
            out.append(
                {
                    "instance_id": rec.instance_id,
                    "cause": rec.cause or body.get("rule", ""),
                    "detected_at": _iso(rec.detected_at),
                    "responded_at": _iso(responded),
                    "isolated_at": _iso(isolated),
                    "action": body.get("action"),
                    "state": rec.state,
                    "closed_at": _iso(rec.closed_at),
                    "outcome": rec.outcome,  # rebooted, replaced, released, recovered, ...
                    "sla_breached": bool(late_response or late_isolation),
                }
            )
        return out
    for f in injected(world.fault_log):
        if f["event"] not in NODE_FAULT_KINDS:
            continue  # a stock-out, a spot reclaim, an API outage, a bad image: no node to isolate
        at = options.start + timedelta(seconds=f["at_s"])
        out.append(
            {
                "instance_id": f["instance_id"],
                "cause": _fault_cause(f),
                "detected_at": None,
                "responded_at": None,
                "isolated_at": None,
                "action": None,
                "sla_breached": end - at > respond,
            }
        )
    return out


def _dt(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return parse_iso(str(value))


def _fault_cause(f: dict[str, Any]) -> str:
    if f["event"] == "xid":
        return f"xid_{f.get('xid')}"
    if f["event"] == "event":
        return str(f.get("code"))
    if f["event"] == "overheat":
        return "gpu_overheat"
    return str(f["event"])  # engine-crash, engine-hang, agent-down


def decisions(controller: Any) -> list[dict[str, Any]]:
    """The run's decisions, oldest first: a baseline's own log, or our service's audited decisions (scale,
    isolation, schedule) with their reasons and inputs from its store."""
    stats = getattr(controller, "stats", None)
    if stats is not None:
        return list(stats.decisions)
    store = getattr(controller, "store", None)
    if store is None:
        return []
    return [
        {
            "at": _iso(rec.at),
            "desired": rec.target,
            "kind": rec.kind,
            "action": rec.action,
            "outcome": rec.outcome,
            "instance_id": rec.instance_id,
            "reason": rec.reason,
            "inputs": rec.inputs or {},
        }
        for rec in sorted(store.decisions(), key=lambda r: r.at)
    ]
