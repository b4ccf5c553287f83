"""Wiring one replica of the service: ``build_service`` (store, lease, observer, actuator, notifier) and
``run_forever`` (the APScheduler interval job that ticks it until a signal).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fleet.cloud.clients import CloudClients
from fleet.config import FleetConfig
from fleet.service.loop import Service
from fleet.service.metrics import ServiceMetrics
from fleet.service.notify import Channel, Notifier
from fleet.service.observe import ClientsFor
from fleet.service.settings import NowFn, ServiceSettings, wall_clock
from fleet.service.store import open_store
from policies.spec import GroupSpec

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

log = logging.getLogger("fleet.service")

DRY_RUN_SUFFIX = "-dry-run"
TICK_JOB_ID = "fleet-tick"
# How long past two intervals the tick job may stay silent before its schedule is rebuilt (TickWatch).
STALL_SLACK_S = 1.0


class TickWatch:
    """Notices the interval job no longer firing, by the monotonic clock.

    APScheduler 3 schedules by the wall clock: when it steps back (an NTP step at boot, a VM restored from a
    snapshot, a clock set by hand), the next run lies that far ahead and the service would stall as long (an
    hour back: an hour without a tick, the lease lost, nothing scaled or isolated). The monotonic clock
    never steps: no tick started or ended for two intervals and :data:`STALL_SLACK_S` means the schedule is
    to be rebuilt from the wall clock as it reads now. A tick still running is never a stall (a slow cloud:
    the job's ``max_instances`` skips the runs meanwhile).
    """

    def __init__(self, interval_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._monotonic = monotonic
        self._last = monotonic()
        self._running = False
        self._overran = False
        self._lock = threading.Lock()

    def started(self) -> None:
        with self._lock:
            self._running, self._last, self._overran = True, self._monotonic(), False

    def overran(self) -> bool:
        """A run came due while the tick is still running: True the first time for that tick."""
        with self._lock:
            first = self._running and not self._overran
            self._overran = self._overran or self._running
            return first

    def finished(self) -> None:
        with self._lock:
            self._running, self._last = False, self._monotonic()

    def stalled_s(self) -> float | None:
        """Seconds without a tick when that is a stall (then counted afresh), else None."""
        with self._lock:
            idle = self._monotonic() - self._last
            if self._running or idle <= 2 * self.interval_s + STALL_SLACK_S:
                return None
            self._last = self._monotonic()
            return idle


def build_service(
    config: FleetConfig,
    clients: CloudClients,
    database_url: str = "sqlite://",
    clock: NowFn | None = None,
    dry_run: bool = False,
    notifier: Notifier | None = None,
    *,
    holder_id: str | None = None,
    settings: ServiceSettings | None = None,
    metrics: ServiceMetrics | None = None,
    clients_for: ClientsFor | None = None,
) -> Service:
    """A ready Service: store migrated, lease manager, observer, actuator, notifier started.

    ``notifier`` defaults to one built from ``config.notifications`` (none configured: no notifications).
    """
    settings = settings or ServiceSettings.from_config(config)
    if dry_run and not settings.service_name.endswith(DRY_RUN_SUFFIX):
        # A shadow run keeps its own lease, history and decisions: sharing them with the real service would
        # let it take the lease from the acting replica and overwrite the history the real one resumes from.
        settings = replace(settings, service_name=settings.service_name + DRY_RUN_SUFFIX)
    store = open_store(database_url, service=settings.service_name)
    try:
        # read-only (a file owned by another user, a standby server): refused here, not at every tick
        store.check_writable()
    except Exception:
        store.close()
        raise
    specs: list[GroupSpec] = list(config.groups)
    holder = holder_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    service = Service(
        specs=specs,
        clients=clients,
        store=store,
        settings=settings,
        clock=clock or wall_clock,
        dry_run=dry_run,
        notifier=None,
        holder_id=holder,
        metrics=metrics or ServiceMetrics(),
        clients_for=clients_for,
    )
    if notifier is None:
        channels = [Channel.from_config(c) for c in config.notifications]
        notifier = Notifier(channels, on_delivered=service._delivered)
    elif notifier.on_delivered is None:
        notifier.on_delivered = service._delivered
    service.notifier = notifier.start()
    return service


class _SkippedRunLines(logging.Filter):
    """Drops APScheduler's warning for each run skipped while the tick still runs (one per interval, naming
    ``run_forever.<locals>.job``); ``run_forever`` says it once per long tick in its own words."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances" not in str(record.msg)


def run_forever(
    service: Service,
    interval_s: float,
    *,
    stop: threading.Event | None = None,
    install_signals: bool = True,
    on_hangup: Callable[[], bool] | None = None,
    scheduler: BaseScheduler | None = None,
) -> str | None:
    """Tick every ``interval_s`` with an APScheduler interval job until SIGTERM/SIGINT (or ``stop``).

    A signal lets the running tick finish (the job is never interrupted), then the scheduler shuts down and
    the lease is released so another replica can take over at once. A fatal tick (the database file gone)
    stops the loop too; its reason is returned (None after a normal stop). SIGHUP calls ``on_hangup`` (in
    this thread, between ticks): when it returns True the loop stops as for SIGTERM (the caller restarts
    with the new configuration), else it goes on. When the job stops firing (the wall clock stepped back:
    :class:`TickWatch`) the schedule is rebuilt from now. ``scheduler``: a not yet started APScheduler (a
    test's), else a BackgroundScheduler in UTC.
    """
    fatal: list[str] = []
    from apscheduler.schedulers.background import BackgroundScheduler

    stop = stop or threading.Event()
    hangup = threading.Event()
    if install_signals:

        def _on_signal(signum: int, _frame: Any) -> None:
            log.info("signal %s: finishing the current tick, then exiting", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        if on_hangup is not None and hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, lambda _signum, _frame: hangup.set())

    watch = TickWatch(interval_s)

    def job() -> None:
        if stop.is_set():
            return
        watch.started()
        try:
            tick()
        finally:
            watch.finished()

    def tick() -> None:
        result = service.tick(service.clock())
        log.info(
            "tick leader=%s actions=%d errors=%d calls=%d %.3fs",
            result.leader,
            len(result.actions),
            len(result.errors),
            result.api_calls,
            result.duration_s,
            extra={"leader": result.leader, "epoch": result.lease_epoch},
        )
        for error in result.errors:
            # the count alone says something failed; the reason is what an operator needs to act on
            log.warning("tick error: %s", error, extra={"epoch": result.lease_epoch})
        if result.fatal:
            fatal.append(result.fatal)
            stop.set()

    from apscheduler.events import EVENT_JOB_MAX_INSTANCES

    def skipped(_event: object) -> None:
        if watch.overran():
            log.warning(
                "tick still running after its %.1f s interval (a slow cloud or store?): no second tick "
                "starts beside it; the next one starts when it ends",
                interval_s,
            )

    scheduler = scheduler or BackgroundScheduler(timezone=UTC)
    scheduler.add_listener(skipped, EVENT_JOB_MAX_INSTANCES)
    quiet = _SkippedRunLines()
    logging.getLogger("apscheduler.scheduler").addFilter(quiet)
    scheduler.add_job(
        job,
        "interval",
        seconds=interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(interval_s)),
        id=TICK_JOB_ID,
    )
    scheduler.start()
    try:
        while not stop.wait(0.2):
            if hangup.is_set() and on_hangup is not None:
                hangup.clear()
                if on_hangup():
                    stop.set()
            idle = watch.stalled_s()
            if idle is not None:
                log.warning(
                    "no tick for %.0f s (one every %.1f s expected; did the wall clock step back?): "
                    "ticking now and every %.1f s from now",
                    idle,
                    interval_s,
                    interval_s,
                )
                scheduler.reschedule_job(TICK_JOB_ID, trigger="interval", seconds=interval_s)
                scheduler.modify_job(TICK_JOB_ID, next_run_time=datetime.now(UTC))
    finally:
        scheduler.shutdown(wait=True)  # waits for a running tick to finish
        logging.getLogger("apscheduler.scheduler").removeFilter(quiet)
        service.close(release_lease=not fatal)
    return fatal[0] if fatal else None
