"""The service's own knobs, read once from the validated ``FleetConfig``, and its clock."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fleet.config import FleetConfig

# What the service reads the time from: a function returning an aware datetime (wall, or a virtual clock).
NowFn = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ServiceSettings:
    """The service's own knobs, read from FleetConfig (with defaults where the config has none)."""

    service_name: str = "fleet"
    tick_interval_s: float = 15.0
    lease_ttl_s: float = 45.0
    lease_shards: int = 1
    lease_renew_interval_s: float | None = None  # None: a third of the TTL (0: never renewed mid-tick)
    observe_workers: int = 8
    # The per-product request budget of fleet.service.pool; off only against an in-process fake (simulator).
    call_rate_limit: bool = True
    instances_refresh_s: float = 0.0
    schedule_sync_interval_s: float = 300.0
    # How often the leader prunes demand minutes and forecasts past their retention (service/demand.py)
    prune_interval_s: float = 3600.0
    notify_scale_min_change: int = 1
    # A run of failed scale writes pages once it counts this many writes and its first is this old, again
    # every renotify interval while it lasts (fleet/service/write_alerts.py): no single transient failure
    # pages, a group that cannot scale does within minutes.
    scale_failure_notify_after_attempts: int = 3
    scale_failure_notify_after_s: float = 300.0
    scale_failure_renotify_s: float = 7200.0
    api_host: str = "127.0.0.1"
    api_port: int = 8780
    api_token: str | None = field(default=None, repr=False)
    api_enabled: bool = True

    @classmethod
    def from_config(cls, config: FleetConfig, env: Mapping[str, str] | None = None) -> ServiceSettings:
        env = dict(os.environ if env is None else env)
        tick = float(config.tick_interval_s)
        token = config.api.token.get_secret_value() if config.api.token is not None else None
        return cls(
            tick_interval_s=tick,
            # A lease shorter than two ticks would lapse between renewals: every tick would be a takeover.
            lease_ttl_s=max(float(config.lease.ttl_s), 2 * tick + 1.0),
            lease_shards=config.lease.shards,
            observe_workers=config.observe.workers,
            instances_refresh_s=float(config.observe.instances_refresh_s),
            schedule_sync_interval_s=float(config.schedule_sync_interval_s),
            notify_scale_min_change=config.notify_scale_min_change,
            api_host=config.api.host or "127.0.0.1",
            api_port=config.api.port,
            api_token=token or env.get("FLEET_API_TOKEN") or None,
        )
