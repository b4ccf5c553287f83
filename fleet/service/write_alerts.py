"""Paging on scale writes that keep failing: a group that cannot scale at peak must reach a person.

A scale write ESS refuses (a RAM denial such as ``Forbidden.RAM`` on ScaleWithAdjustment,
``InvalidParameter``, a deleted scaling configuration, ``IncorrectScalingGroupStatus``) or that keeps
failing transiently (throttling, 5xx, the network) is audited, logged and shown in `fleet status` by the
actuator; this module adds the notification, by the same rule for both kinds so that a single transient
failure never pages:

- *failing*: once a run of failed scale writes of a group (no applied one between them) counts at least
  ``after_attempts`` writes AND its first is at least ``after_s`` old (3 writes and 5 minutes by default:
  ESS's own retries of a throttled call and a tick's worth of 5xx stay quiet, a denial at every tick of a
  15 s loop pages after 5 minutes);
- *still failing*: again every ``repeat_s`` (2 hours) while the run lasts, never at every tick;
- *recovered*: once, at the first applied write after a page.

Ticks that write nothing (ESS already has the target, a conflict with an activity in progress, a paused or
disabled group) neither extend nor end a run. Each page is kept as an event of the pseudo-incident
``scale-write:<group>`` (as SLA pages keep theirs; fleet/service/pseudo_incidents.py), so a restarted or new
leader resumes a paged run instead of paging it again, and still announces its recovery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.service.actuate import ActionResult
from fleet.service.notify import Announcement
from fleet.service.pseudo_incidents import Kinds, Timeline
from fleet.service.store import Outcome, Store

log = logging.getLogger(__name__)

FAILING = "scale_write_failing"
STILL_FAILING = "scale_write_still_failing"
RECOVERED = "scale_write_recovered"
KINDS = Kinds(start=FAILING, repeat=STILL_FAILING, end=RECOVERED)
# the outcomes of a scale write that reached ESS and was answered: refused for good, or transiently
_FAILED = (Outcome.FAILED, Outcome.ERROR)


def event_key(group: str) -> str:
    """The pseudo-incident whose timeline keeps a group's scale-write pages."""
    return f"scale-write:{group}"


@dataclass
class _Run:
    """A run of failed scale writes of one group: since when, how many, the last error and target (whether
    and when it was paged: :attr:`ScaleWriteAlerts.pages`)."""

    first_at: datetime
    attempts: int = 0
    error: str = ""
    target: int | None = None


class ScaleWriteAlerts:
    """Watches each group's scale writes, tick by tick, and notifies when a run of failures starts, lasts
    and ends (module docstring)."""

    def __init__(
        self,
        store: Store,
        notify: Callable[[Announcement], None],
        *,
        after_attempts: int = 3,
        after_s: float = 300.0,
        repeat_s: float = 7200.0,
    ) -> None:
        if after_attempts < 1 or after_s < 0 or repeat_s <= 0:
            raise ValueError("after_attempts must be at least 1, after_s at least 0 and repeat_s above 0")
        self.store = store
        self.notify = notify
        self.after_attempts = after_attempts
        self.after_s = after_s
        self.repeat_s = repeat_s
        self.pages = Timeline(store, KINDS)
        self._runs: dict[str, _Run] = {}
        self._resumed: set[str] = set()

    def observe(self, group: str, actions: Sequence[ActionResult], now: datetime) -> None:
        """One tick's actions of ``group``: its scale write, if it made one, moves the group's run."""
        writes = [a for a in actions if a.kind == "scale" and a.outcome in (Outcome.APPLIED, *_FAILED)]
        if not writes:
            return
        self._resume(group)
        last = writes[-1]
        if last.outcome == Outcome.APPLIED:
            self._ended(group, now)
        else:
            self._failed(group, last, now)

    def _resume(self, group: str) -> None:
        """Once per group and process: a run paged before (by this replica before a restart, or by another
        leader) and not recovered since is taken up from its events."""
        if group in self._resumed:
            return
        self._resumed.add(group)
        paged = self.pages.current(event_key(group))
        if paged is not None:
            self._runs[group] = _Run(paged.started_at, attempts=self.after_attempts, error=paged.detail)

    def _failed(self, group: str, write: ActionResult, now: datetime) -> None:
        run = self._runs.setdefault(group, _Run(first_at=now))
        run.attempts += 1
        run.error = write.error or write.outcome
        run.target = write.target
        due = run.attempts >= self.after_attempts and (now - run.first_at).total_seconds() >= self.after_s
        if self.pages.current(event_key(group)) is None and not due:
            return
        kind = self.pages.holds(event_key(group), now, run.error[:2000], repeat_s=self.repeat_s)
        if kind is not None:
            self._page(group, run, now, kind)

    def _page(self, group: str, run: _Run, now: datetime, kind: str) -> None:
        minutes = int((now - run.first_at).total_seconds() // 60)
        still = "still " if kind == STILL_FAILING else ""
        title = f"{group}: scale writes {still}failing for {minutes} min"
        text = (
            f"{run.attempts} scale write(s) in a row failed since {run.first_at.isoformat()}: the group "
            f"cannot reach its target ({run.target}) until a write succeeds. Last error: {run.error}"
        )
        fields = {
            "target": run.target,
            "failed_writes": run.attempts,
            "failing_since": run.first_at.isoformat(),
        }
        self._announce(group, title, text, "critical", fields)

    def _ended(self, group: str, now: datetime) -> None:
        run = self._runs.pop(group, None)
        if run is None or self.pages.current(event_key(group)) is None:
            return  # a run nobody was paged for ends quietly
        minutes = int((now - run.first_at).total_seconds() // 60)
        title = f"{group}: scale writes succeed again"
        text = f"a scale write was applied after {run.attempts} failed one(s) over {minutes} min"
        self.pages.clear(event_key(group), now, text)
        self._announce(group, title, text, "info", {"failing_since": run.first_at.isoformat()})

    def _announce(self, group: str, title: str, text: str, severity: str, fields: dict[str, Any]) -> None:
        """Log a page of the group's run (an error while it fails, a warning at its end) and notify it."""
        level = logging.ERROR if severity == "critical" else logging.WARNING
        log.log(level, "%s: %s", title, text, extra={"group": group})
        self.notify(
            Announcement(
                kind="scale_failure", title=title, text=text, severity=severity, group=group, fields=fields
            )
        )
