"""The simulation's virtual-time loop: fake cloud clock, simulated world and a controller, in lock step.

One run: an in-process fake Alibaba Cloud (``fleet.testing.mock_aliyun``, on a manual clock) with one scaling
group, the world of :mod:`fleet.sim.world` living in it, and a controller ticking on the virtual clock: for
``ours`` the real service (``fleet.service.build_service(...).tick(now)``: observe through the SDK adapters,
``policies.decide``, actuate, record), otherwise one of the baselines of :mod:`fleet.sim.baselines`. Between
ticks the world advances in engine steps and the cloud clock follows it, so ESS boots and scaling activities
happen on simulated time.

The run collects a per-minute series (load, capacity, P99 TTFT, temperature, incidents) for the report, checks
the safety invariants after every tick and ends with the summary whose field names the issue fixes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from fleet.sim import cloudview
from fleet.sim.capacity import Billing
from fleet.sim.modelerror import ModelError
from fleet.sim.types import Hardware, MinutePoint, SimOptions, SimResult
from fleet.sim.workload import Request
from fleet.sim.world import Fault, World, WorldParams, unfired
from sizing.stats import nearest_rank


def summarize(
    world: World,
    series: Sequence[MinutePoint],
    *,
    slo_ttft_ms: float,
    gpu_hours: float,
    cost_cny: float,
    scale_actions: int,
    max_instances: int,
    incidents: list[dict[str, Any]],
    sla_breaches: int,
    invariant_violations: list[dict[str, Any]],
    warmup: int = 0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's summary (names fixed by the issue). ``slo_violation_minutes`` judges the minutes from
    ``warmup`` on; those before it are counted apart (``warmup_violation_minutes``)."""
    ttfts = sorted(world.all_ttfts_ms)
    tpots = sorted(world.all_tpots_ms)
    late = late_minutes(series, slo_ttft_ms)
    return {
        "requests": world.total_requests,
        "completed": world.total_completed,
        "rejected": world.total_rejected,
        "dropped": world.total_dropped,
        "unfinished": world.total_unfinished,
        "slo_violation_minutes": sum(1 for m in late if m >= warmup),
        "warmup_minutes": warmup,
        "warmup_violation_minutes": sum(1 for m in late if m < warmup),
        "slo_ttft_p99_ms": slo_ttft_ms,  # what the minutes were judged by
        # over the completed requests: with none there is no percentile (0.0 read as the best run there is)
        "ttft_p99_ms": round(nearest_rank(ttfts, 99), 1) if ttfts else None,
        "tpot_p99_ms": round(nearest_rank(tpots, 99), 2) if tpots else None,
        "gpu_hours": round(gpu_hours, 2),
        "cost_cny": round(cost_cny, 2),
        "scale_actions": scale_actions,
        "max_instances": max_instances,
        "incidents": incidents,
        "sla_breaches": sla_breaches,
        "invariant_violations": invariant_violations,
        **(extra or {}),
    }


def late_minutes(series: Sequence[MinutePoint], slo_ttft_ms: float, since: int = 0) -> list[int]:
    """The minutes from ``since`` on whose P99 TTFT broke the SLO."""
    return [
        p.minute
        for p in series
        if p.minute >= since and p.ttft_p99_ms is not None and p.ttft_p99_ms > slo_ttft_ms
    ]


def warmup_minutes(cold_start_s: float) -> int:
    """The run's first minutes that no policy is judged on: those that start before an instance ordered at the
    run's start can serve (``cold_start_s``, plus up to a minute for the order to be seen and the instance to
    take traffic). Until then every policy serves with the start fleet the simulator chose, not one it chose
    (docs/simulator.md)."""
    return math.ceil((cold_start_s + 60.0) / 60.0 - 1e-9)


def _start_fleet(spec: Any, options: SimOptions) -> int:
    """The fleet serving when the run starts, inside the group's [min_size, max_size] like every count."""
    floor = cloudview.initial_size(spec, options.start)
    initial = floor if options.initial_size is None else max(floor, options.initial_size)
    if options.policy == "static-peak" and options.static_size is not None:
        initial = options.static_size
    if options.policy == "oracle" and options.oracle_need:
        from fleet.sim.oracle import desired_at, lead_s

        lead = lead_s(float(spec.cold_start_s), sync_s=options.sync_s)
        initial = desired_at(options.oracle_need, 0.0, lead, spec.min_size, spec.max_size)
    return min(spec.max_size, max(spec.min_size, initial))


def _capacity_fields(spec: Any, options: SimOptions, model_error: ModelError) -> dict[str, Any]:
    """What the run was sized with: the group's max_size against the instances the 1-minute peak needs (the
    run says when the workload needs more than the group may hold), and the world's model error."""
    need = options.peak_need
    out: dict[str, Any] = {
        "max_size": spec.max_size,
        "peak_instances_needed": need,
        "exceeds_max_size": bool(need is not None and need > spec.max_size),
    }
    if options.capacity_rps is not None:
        out["capacity_rps_per_instance"] = round(options.capacity_rps, 3)
    if model_error.pct:
        out["model_error_pct"] = model_error.pct
        out["model_error_bias_pct"] = round(100.0 * model_error.bias, 1)
    return out


def minute_p99(ttfts: list[float]) -> float | None:
    if not ttfts:
        return None
    return nearest_rank(sorted(ttfts), 99)


def _tick(controller: Any, now: Any, *, baseline: bool) -> int:
    """One tick of the controller; 1 when a baseline's cloud call failed (an ``api-outage``), which skips
    the rest of its tick as a controller that logs the error and tries again next period. Our service
    handles its own failed calls (docs/service.md, Failure modes): one escaping it is a defect, raised."""
    from fleet.cloud.errors import CloudError

    try:
        controller.tick(now)
    except CloudError:
        if not baseline:
            raise
        return 1
    return 0


def run(
    config: Any,
    requests: Sequence[Request],
    *,
    options: SimOptions,
    hardware: Hardware,
    engine_factory: Callable[[float, int], Any],
    faults: Sequence[Fault] = (),
    workload_name: str = "",
    group_index: int = 0,
    progress: Callable[[float], None] | None = None,
    history: Sequence[Any] = (),
) -> SimResult:
    """Simulate ``options.hours`` of ``requests`` against the group ``config.groups[group_index]``.

    ``history``: demand rows (``fleet.service.demand.DemandReading``) the service's store starts with.
    """
    from fleet.testing import ManualClock, mock_aliyun

    wall0 = time.perf_counter()
    spec = config.groups[group_index]
    duration_s = options.hours * 3600.0
    clock = ManualClock(options.start)
    # CloudMonitor keeps a week of points; the simulation reads only the last minutes, so an hour keeps memory
    # flat over long runs. The fake's sleeps for injected latency would stall virtual time: off.
    with mock_aliyun(
        boot_seconds=options.boot_s,
        seed=options.seed,
        account_id=config.account_id,
        clock=clock,
        metric_retention_s=3600.0,
        sleep_latency=False,
    ) as cloud:
        initial = _start_fleet(spec, options)
        group_id = cloudview.create_group(
            cloud,
            spec,
            hardware,
            initial,
            region=config.region,
            max_size=spec.max_size,
            setup=options.group_setup,
        )
        config = cloudview.bind_group(config, group_index, group_id)
        spec = config.groups[group_index]
        params = WorldParams(
            cold_start_s=float(spec.cold_start_s),
            queue_limit=options.queue_limit,
            gpus_per_instance=hardware.gpus_per_instance,
            publish_period_s=options.publish_s,
            step_s=options.step_s,
            restart_s=options.restart_s,
        )
        model_error = ModelError.draw(options.model_error_pct, options.seed)
        world = World(
            cloud,
            group_id,
            engine_factory,
            params,
            requests,
            faults,
            instance_lister=cloudview.list_group_instances,
            model_speed=model_error.speed if model_error.pct else None,
        )
        world.sync(prewarmed=True)
        world.publish()  # the pre-warmed fleet has reported once before the first tick
        world.next_publish_s = options.publish_s
        t0_s = cloud.now_s()
        controller, checker = cloudview.make_controller(options, config, spec, cloud, clock, group_id)
        demand_log = getattr(controller, "demand", None)
        if history and demand_log is not None:
            demand_log.write(spec.name, history)  # days of production, as the store would hold them
        # The start fleet's creation is an activity of the group's first instant, nobody's decision: neither a
        # scale action nor, beside the first tick's write, a second write in one tick.
        prewarm = frozenset(cloud.ess.activities)
        checker.known(prewarm)
        # Baselines tick at their own documented period; ours at the service's tick.
        tick_s = float(getattr(controller, "period_s", options.tick_s))

        series: list[MinutePoint] = []
        billing = Billing(hardware.price_cny_per_hour, hardware.gpus_per_instance)
        max_instances = len(world.instances)
        failed_ticks = 0
        t = 0.0
        next_tick = 0.0
        next_minute = 60.0
        while t < duration_s - 1e-9:
            if t >= next_tick - 1e-9:
                now = cloud.now()
                tick_start_s = cloud.now_s()
                failed_ticks += _tick(controller, now, baseline=options.policy != "ours")
                cloud.tick()
                cloudview.check(checker, world, cloud, group_id, now, tick_start_s)
                next_tick += tick_s
            end = min(duration_s, next_tick, next_minute, t + options.sync_s)
            world.run_until(end)
            cloud.advance(end - t)
            billing.add(world, cloud, end - t)  # stopped instances bill disks only, spot its price
            t = end
            world.sync()
            max_instances = max(max_instances, len(world.instances))
            if t >= next_minute - 1e-9:
                series.append(
                    cloudview.minute_point(
                        world, cloud, group_id, int(round(next_minute / 60)) - 1, options.start
                    )
                )
                series[-1].cost_cny = billing.cost_cny
                next_minute += 60.0
                if progress is not None:
                    progress(t / duration_s)
        world.finish()
        # Per-minute P99 TTFT is over the requests that arrived in that minute (rejections count as misses).
        for p in series:
            stats = world.minutes.get(p.minute)
            if stats:
                p.ttft_p99_ms = minute_p99(stats.ttfts_ms)
                p.arrivals, p.completed, p.rejected = stats.arrivals, stats.completed, stats.rejected
        incidents = cloudview.incidents(controller, world, options, spec)
        summary = summarize(
            world,
            series,
            slo_ttft_ms=options.slo_ttft_ms,
            gpu_hours=billing.gpu_hours,
            cost_cny=billing.cost_cny,
            scale_actions=cloudview.scale_actions(cloud, group_id, t0_s, prewarm),
            max_instances=max_instances,
            incidents=incidents,
            sla_breaches=sum(1 for i in incidents if i.get("sla_breached")),
            invariant_violations=checker.violations,
            warmup=warmup_minutes(float(spec.cold_start_s)),
            extra={
                **_capacity_fields(spec, options, model_error),
                **billing.summary(),
                **({"failed_ticks": failed_ticks} if failed_ticks else {}),
                **({"unfired_faults": missed} if (missed := unfired(world.faults)) else {}),
            },
        )
        decisions = cloudview.decisions(controller)
    return SimResult(
        summary,
        series,
        incidents,
        world.fault_log,
        decisions,
        options,
        hardware,
        workload_name,
        spec.name,
        wall_s=time.perf_counter() - wall0,
    )
