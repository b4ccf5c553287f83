"""The console's pages, rendered on the server from the store and the replica's live status.

Each page is a function of plain values (the status view, store rows, the viewer, ``now``) to escaped HTML;
routes.py does the reading. Forms that change something are drawn only for a signed-in viewer and carry the
session's CSRF token; a read-only viewer sees the same numbers without them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fleet.service.console import svg
from fleet.service.console.data import CapacityPoint, DecisionFilter, ForecastPoint
from fleet.service.console.html import Safe, esc, join, options, render, table
from fleet.service.console.security import CSRF_FIELD
from fleet.service.store import (
    DecisionRecord,
    IncidentEvent,
    IncidentRecord,
    OperatorRequest,
    is_human,
    state_label,
)
from fleet.service.views import request_log_view, request_target, request_waits
from policies.model import ReasonCode

# Seconds between live refreshes of a page's <main> (the script); without script, <noscript> meta refresh.
REFRESH_S = 10
SPARK_WINDOW = timedelta(hours=6)
WINDOWS = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
}
OUTCOME_COLOR = {"applied": "#2ca02c", "error": "#d62728", "conflict": "#ff7f0e", "fenced": "#8c564b"}


@dataclass(frozen=True)
class Viewer:
    """Who is looking: a signed-in operator (``name`` and ``csrf``) or nobody (read-only)."""

    name: str | None = None
    csrf: str = ""
    can_sign_in: bool = True

    @property
    def signed_in(self) -> bool:
        return self.name is not None


def _ts(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def _num(value: Any) -> Safe:
    return render('<span class="num">{v}</span>', v="-" if value is None else value)


def countdown(
    deadline: datetime | None, done: datetime | None, now: datetime, closed: datetime | None = None
) -> Safe:
    """A deadline with the time left; the script counts it down, the server's value stands without script."""
    if deadline is None:
        return Safe("-")
    if done is not None:
        return render('<span class="muted">met at {t}</span>', t=_ts(done))
    if closed is not None:
        return Safe('<span class="muted">closed before it</span>')
    left = (deadline - now).total_seconds()
    cls = "late" if left < 0 else ("soon" if left < 300 else "")
    return render(
        '<span class="countdown {cls}" data-deadline="{iso}" title="{iso}">{text}</span>',
        cls=cls,
        iso=deadline.isoformat(),
        text=_left_text(left),
    )


def _left_text(seconds: float) -> str:
    a = abs(round(seconds))
    h, m, s = a // 3600, (a % 3600) // 60, a % 60
    text = (f"{h}h " if h else "") + (f"{m}m " if h or m else "") + f"{s}s"
    return "overdue " + text if seconds < 0 else text


def action_form(viewer: Viewer, path: str, label: str, back: str, **fields: str) -> Safe:
    """A POST button for an operator action; nothing for a read-only viewer."""
    if not viewer.signed_in:
        return Safe("")
    hidden = join(render('<input type="hidden" name="{k}" value="{v}">', k=k, v=v) for k, v in fields.items())
    return render(
        '<form class="inline" method="post" action="{path}">'
        '<input type="hidden" name="{csrf_field}" value="{csrf}">'
        '<input type="hidden" name="next" value="{back}">'
        '{hidden}<button type="submit">{label}</button></form>',
        path=path,
        csrf_field=CSRF_FIELD,
        csrf=viewer.csrf,
        back=back,
        hidden=hidden,
        label=label,
    )


def layout(title: str, here: str, viewer: Viewer, body: Safe, now: datetime, message: str = "") -> Safe:
    nav = join(
        render(
            '<a href="{href}" class="{cls}">{label}</a>',
            href=href,
            cls="here" if key == here else "",
            label=label,
        )
        for key, href, label in (
            ("fleet", "/console/", "Fleet"),
            ("incidents", "/console/incidents", "Incidents"),
            ("decisions", "/console/decisions", "Decisions"),
        )
    )
    if viewer.signed_in:
        who = render(
            '<span class="who">signed in as <b>{name}</b> '
            '<form method="post" action="/console/signout"><input type="hidden" name="{f}" value="{csrf}">'
            '<button type="submit">sign out</button></form></span>',
            name=viewer.name,
            f=CSRF_FIELD,
            csrf=viewer.csrf,
        )
    elif viewer.can_sign_in:
        who = Safe('<span class="who">read-only · <a href="/console/signin">sign in</a></span>')
    else:
        who = Safe('<span class="who">read-only (no API token configured)</span>')
    flash = render('<p class="flash" role="status">{m}</p>', m=message) if message else Safe("")
    return render(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>{title} · fleet console</title>"
        '<link rel="icon" href="/console/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>'
        '<script src="/console/static/console.js" defer></script></head>'
        '<body data-refresh="{refresh}"><header><b>fleet console</b>{nav}{who}</header>'
        "<main><h1>{title}</h1>{flash}{body}</main>"
        "<footer>rendered {now} UTC by the fleet service</footer></body></html>",
        title=title,
        refresh=REFRESH_S,
        nav=nav,
        who=who,
        flash=flash,
        body=body,
        now=_ts(now),
    )


# ---- Fleet ---------------------------------------------------------------------------------------------


def _floors(g: dict[str, Any], codes: Sequence[str]) -> Safe:
    """The floor and where it comes from: active schedules, floor reasons of the last scale."""
    parts = []
    if g.get("floor") is not None:
        parts.append(f"floor {_bound(g, 'floor')}")  # a holiday's source names the day: min_size on holiday
    if g.get("active_schedules"):
        parts.append("schedule: " + ", ".join(g["active_schedules"]))
    if codes:
        parts.append("in force: " + ", ".join(dict.fromkeys(codes)))
    return esc("; ".join(parts) or "-")


def capacity_line(points: Sequence[CapacityPoint], desired_now: Any, start: datetime, now: datetime) -> list:
    """Desired capacity over the window: what ESS had before the first write, each write, and now."""
    line = [(p.at, float(p.target)) for p in points if p.target is not None]
    if points and points[0].observed_desired is not None:
        line.insert(0, (start, float(points[0].observed_desired)))
    if desired_now is not None:
        # With no write in the window, the desired capacity observed now has held since its start.
        line.append((now if line else start, float(desired_now)))
    return line


def _spark(points: Sequence[CapacityPoint], g: dict[str, Any], now: datetime) -> Safe:
    capacity = capacity_line(points, g.get("desired"), now - SPARK_WINDOW, now)
    demand = [(p.at, p.demand) for p in points if p.demand is not None]
    if not capacity and not demand:
        return Safe('<span class="muted">no scale decisions</span>')
    return svg.chart(
        [
            svg.Series("capacity (desired)", "#1f77b4", capacity),
            svg.Series("demand (rules asked)", "#d62728", [(a, float(v)) for a, v in demand], dash="3 2"),
        ],
        now - SPARK_WINDOW,
        now,
        title="capacity and demand, last 6 h",
    )


def fleet_page(
    status: dict[str, Any],
    last: dict[str, DecisionRecord],
    series: dict[str, list[CapacityPoint]],
    floors: dict[str, tuple[str, ...]],
    viewer: Viewer,
    now: datetime,
) -> Safe:
    rows = []
    for g in status.get("groups", []):
        name = g["name"]
        d = last.get(name)
        serving = None if g.get("in_service") is None else g["in_service"] + (g.get("pending") or 0)
        pause = action_form(
            viewer,
            f"/console/groups/{name}/{'resume' if g.get('paused') else 'pause'}",
            "resume" if g.get("paused") else "pause",
            "/console/",
        )
        rows.append(
            [
                render(
                    '<a href="/console/groups/{n}">{n}</a>{p}',
                    n=name,
                    p=Safe(' <span class="paused">paused</span>') if g.get("paused") else Safe(""),
                ),
                _num(g.get("desired")),
                _num(g.get("in_service")),
                _num(serving),
                _num(g.get("standby")),
                _num(g.get("target")),
                _floors(g, floors.get(name, ())),
                "-" if d is None else render("{at} {a} → {o}", at=_ts(d.at), a=d.action, o=d.outcome),
                (d.reason if d else None) or g.get("reason") or "-",
                _spark(series.get(name, []), g, now),
                pause,
            ]
        )
    headers = [
        "group",
        "desired",
        "InService",
        "serving",
        "Standby",
        "target",
        "floors in force",
        "last decision",
        "reason",
        "capacity / demand (6 h)",
        "",
    ]
    leader = status.get("lease") or {}
    replica = status.get("replica") or {}
    head = render(
        "<p>leader: <b>{holder}</b> (epoch {epoch}) · this replica: {me}{lead} · last tick {tick} · "
        '<a href="/console/incidents">{n} open incident(s)</a></p>',
        holder=leader.get("holder", "none"),
        epoch=leader.get("epoch", "-"),
        me=replica.get("holder", "-"),
        lead=" (leader)" if replica.get("leader") else "",
        tick=replica.get("last_tick_at") or "-",
        n=len(status.get("incidents", [])),
    )
    note = Safe(
        '<p class="muted">desired, InService, serving (InService + Pending) and Standby are this '
        "replica's last observation; a standby replica shows the store's view only.</p>"
    )
    return join([head, table(headers, rows, cls="fleet"), note])


# ---- Group ---------------------------------------------------------------------------------------------


def group_page(
    name: str,
    g: dict[str, Any],
    points: Sequence[CapacityPoint],
    forecast: list[ForecastPoint],
    window: str,
    viewer: Viewer,
    now: datetime,
) -> Safe:
    start = now - WINDOWS[window]
    picker = join(
        render('<a href="?window={w}" class="{cls}">{w}</a> ', w=w, cls="here" if w == window else "")
        for w in WINDOWS
    )
    target = capacity_line(points, g.get("desired"), start, now)
    chart = svg.chart(
        [
            svg.Series("desired (decided)", "#1f77b4", target),
            svg.Series(
                "InService (observed)",
                "#2ca02c",
                [(p.at, float(p.in_service)) for p in points if p.in_service is not None],
                dash="5 3",
            ),
            svg.Series(
                "demand (rules asked)",
                "#d62728",
                [(p.at, p.demand) for p in points if p.demand is not None],
                dash="2 2",
            ),
        ],
        start,
        now,
        width=900,
        height=260,
        axis=True,
        markers=[
            svg.Marker(p.at, OUTCOME_COLOR.get(p.outcome, "#999"), f"{_ts(p.at)} {p.outcome}: {p.reason}")
            for p in points
        ],
        title=f"{name}: capacity over {window}",
    )
    pause = action_form(
        viewer,
        f"/console/groups/{name}/{'resume' if g.get('paused') else 'pause'}",
        "resume group" if g.get("paused") else "pause group",
        f"/console/groups/{name}",
    )
    summary = render(
        "<p>{paused}desired {d} · InService {i} · Standby {s} · target {t} · floor {f} · "
        "ceiling {c} {pause}</p>",
        paused=Safe('<span class="paused">paused</span> · ') if g.get("paused") else Safe(""),
        d=g.get("desired", "-"),
        i=g.get("in_service", "-"),
        s=g.get("standby", "-"),
        t=g.get("target", "-"),
        f=_bound(g, "floor"),
        c=_bound(g, "ceiling"),
        pause=pause,
    )
    rows = [
        [
            _ts(p.at),
            _num(p.target),
            _num(p.in_service),
            _num(p.demand),
            p.outcome,
            p.reason,
            _inputs(p.inputs),
        ]
        for p in reversed(points)
    ]
    decisions = table(["at (UTC)", "target", "InService", "demand", "outcome", "reason", "inputs"], rows)
    more = render(
        '<p><a href="/console/decisions?group={n}">every decision of {n}, with inputs</a></p>', n=name
    )
    return join(
        [
            summary,
            render("<p>window: {p}</p>", p=picker),
            chart,
            _forecast_section(forecast, start, now),
            render("<h2>Scale decisions in the window</h2>"),
            decisions,
            more,
        ]
    )


def _bound(g: dict[str, Any], which: str) -> str:
    """The floor or ceiling and what sets it: ``4 (schedule:weekend on holiday 2027-02-11 (as Sunday))``."""
    source = g.get(f"{which}_source")
    return f"{g.get(which, '-')}" + (f" ({source})" if source else "")


def _forecast_section(forecast: list[ForecastPoint], start: datetime, now: datetime) -> Safe:
    """Forecast against actual, in req/s: what the forecast predicted for each time against the demand
    observed then; "none" for a group whose forecasts (predictive scaling) recorded nothing in the window."""
    head = Safe("<h2>Forecast against actual (req/s)</h2>")
    if not forecast:
        return join(
            [
                head,
                Safe(
                    '<p class="muted" id="forecast-none">none: no forecasts in this window '
                    "(predictive scaling off, or not enough demand history yet).</p>"
                ),
            ]
        )
    chart = svg.chart(
        [
            svg.Series("forecast req/s", "#9467bd", [(f.at, f.predicted) for f in forecast], dash="4 2"),
            svg.Series(
                "upper q. req/s",
                "#c5b0d5",
                [(f.at, f.upper) for f in forecast if f.upper is not None],
                dash="1 3",
            ),
            svg.Series(
                "actual req/s",
                "#2ca02c",
                [(f.at, f.actual) for f in forecast if f.actual is not None],
            ),
        ],
        start,
        now,
        width=900,
        height=200,
        axis=True,
        title="forecast against actual demand, req/s",
    )
    return join([head, chart])


# ---- Incidents -----------------------------------------------------------------------------------------


def incidents_page(
    incidents: Sequence[IncidentRecord],
    events: dict[str, list[IncidentEvent]],
    report: dict[str, Any],
    window: str,
    viewer: Viewer,
    now: datetime,
    requests: Sequence[OperatorRequest] = (),
) -> Safe:
    ordered = sorted(incidents, key=lambda i: (not i.is_open, -i.detected_at.timestamp()))
    rows = []
    for inc in ordered:
        rows.append(
            [
                render('<span id="incident-{i}">{i}</span>', i=inc.id),
                inc.group_name,
                inc.instance_id,
                render("<b>{s}</b>", s=inc.state) if inc.is_open else state_label(inc.state, inc.outcome),
                inc.cause,
                _ts(inc.detected_at),
                countdown(inc.respond_by, inc.acknowledged_at, now, inc.closed_at),
                countdown(inc.isolate_by, inc.isolated_at, now, inc.closed_at),
                inc.acknowledged_by or "-",
                _timeline(inc, events.get(inc.id, [])),
                _incident_actions(inc, viewer),
            ]
        )
    headers = [
        "incident",
        "group",
        "instance",
        "state",
        "cause",
        "detected (UTC)",
        "respond by",
        "isolate by",
        "acknowledged by",
        "timeline",
        "",
    ]
    open_n = sum(1 for i in incidents if i.is_open)
    return join(
        [
            render("<p>{n} open · {m} closed in the window</p>", n=open_n, m=len(incidents) - open_n),
            table(headers, rows, cls="incidents"),
            _requests(requests, viewer, now),
            _isolate_form(viewer),
            _sla(report, window),
        ]
    )


def _incident_actions(inc: IncidentRecord, viewer: Viewer) -> Safe:
    if not inc.is_open:
        return Safe("")
    back = "/console/incidents"
    parts = []
    if not is_human(inc.acknowledged_by):
        parts.append(action_form(viewer, f"/console/incidents/{inc.id}/ack", "ack", back))
    if inc.isolated_at is None:
        parts.append(
            action_form(
                viewer,
                "/console/isolate",
                "isolate",
                back,
                instance_id=inc.instance_id,
                reason=f"console: {inc.cause}"[:200],
            )
        )
    parts.append(action_form(viewer, "/console/release", "release", back, instance_id=inc.instance_id))
    return join(parts, " ")


def _requests(requests: Sequence[OperatorRequest], viewer: Viewer, now: datetime) -> Safe:
    """Operator requests: the queued ones (why each waits, and cancel), then the newest handled (how each
    ended). Each row reads the request's ``GET /requests`` view, so it shows what the CLI and the API say."""
    rows = []
    views = [request_log_view(req) for req in requests]
    for v in views:
        queued = v["handled_at"] is None
        if queued:
            state = render("<b>queued</b>; {w}", w=request_waits(v))
        else:
            handled_at = datetime.fromisoformat(v["handled_at"])
            state = render('{o} <span class="muted">at {t}</span>', o=v["outcome"] or "-", t=_ts(handled_at))
        cancel = action_form(viewer, f"/console/requests/{v['id']}/cancel", "cancel", "/console/incidents")
        queued_at = datetime.fromisoformat(v["queued_at"])
        rows.append(
            [
                render('<span id="request-{i}">{i}</span>', i=v["id"]),
                v["kind"],
                request_target(v),
                v["by"] or "-",
                render('<span title="{t}">{age}</span>', t=_ts(queued_at), age=_age(now - queued_at)),
                state,
                cancel if queued else Safe(""),
            ]
        )
    waiting = sum(1 for v in views if v["handled_at"] is None)
    return join(
        [
            render(
                "<h2>Operator requests</h2><p>{n} queued, then the newest handled</p>",
                n=waiting,
            ),
            table(["request", "kind", "target", "by", "age", "state / outcome", ""], rows, cls="requests"),
        ]
    )


def _age(span: timedelta) -> str:
    return _left_text(max(span.total_seconds(), 0.0)) + " ago"


def _isolate_form(viewer: Viewer) -> Safe:
    if not viewer.signed_in:
        return Safe("")
    return render(
        '<h2>Isolate an instance</h2><form method="post" action="/console/isolate">'
        '<input type="hidden" name="{f}" value="{csrf}">'
        '<input type="hidden" name="next" value="/console/incidents">'
        '<label>instance <input name="instance_id" required pattern="[A-Za-z0-9-]+"></label> '
        '<label>reason <input name="reason" required maxlength="200"></label> '
        '<button type="submit">isolate</button></form>',
        f=CSRF_FIELD,
        csrf=viewer.csrf,
    )


def _timeline(inc: IncidentRecord, events: Sequence[IncidentEvent]) -> Safe:
    entries = [(e.at, f"{e.kind}{': ' + e.detail if e.detail else ''}", e.actor) for e in events]
    for t in (inc.body or {}).get("timeline", []):
        try:
            at = datetime.fromisoformat(str(t.get("at")))
        except ValueError:
            continue
        entries.append(
            (
                at,
                f"{t.get('state')} ({t.get('reason')}){': ' + t['detail'] if t.get('detail') else ''}",
                "policy",
            )
        )
    entries.sort(key=lambda e: e[0])
    if not entries:
        return Safe("-")
    items = join(
        render('<li>{at} {what} <span class="muted">({who})</span></li>', at=_ts(at)[11:], what=what, who=who)
        for at, what, who in entries
    )
    return render(
        "<details><summary>{n} entries</summary><ul>{items}</ul></details>", n=len(entries), items=items
    )


def _sla(report: dict[str, Any], window: str) -> Safe:
    s = report["summary"]
    picker = join(render('<a href="?window={w}">{w}</a> ', w=w) for w in WINDOWS)

    def dur(v: float | None) -> str:
        return "-" if v is None else _left_text(v)

    rows = [
        [
            r["id"],
            r["instance_id"],
            r["state"],
            dur(r["time_to_respond_s"]),
            dur(r["time_to_isolate_s"]),
            ",".join(k for k in ("respond", "isolate") if r[f"{k}_breached"]) or "-",
        ]
        for r in report["incidents"]
    ]
    return join(
        [
            render("<h2>SLA report, last {w}</h2><p>window: {p}</p>", w=window, p=picker),
            render(
                '<p id="sla-summary">{n} incident(s); breaches: respond {rb}, isolate {ib}; '
                "median time to respond {mr}, to isolate {mi}</p>",
                n=s["incidents"],
                rb=s["respond_breaches"],
                ib=s["isolate_breaches"],
                mr=dur(s["median_time_to_respond_s"]),
                mi=dur(s["median_time_to_isolate_s"]),
            ),
            table(["incident", "instance", "state", "respond", "isolate", "breach"], rows),
        ]
    )


# ---- Decisions -----------------------------------------------------------------------------------------


def decisions_page(
    rows: Sequence[DecisionRecord],
    f: DecisionFilter,
    since: str,
    groups: Sequence[str],
    outcomes: Sequence[str],
    more_link: str | None,
) -> Safe:
    form = render(
        '<form class="filters" method="get" action="/console/decisions">'
        '<label>group <select name="group">{g}</select></label>'
        '<label>kind <select name="kind">{k}</select></label>'
        '<label>outcome <select name="outcome">{o}</select></label>'
        '<label>reason <select name="reason">{r}</select></label>'
        '<label>since <input name="since" value="{s}" size="5" title="e.g. 30m, 6h, 7d; empty: all"></label>'
        '<button type="submit">filter</button></form>',
        g=options(groups, f.group),
        k=options(["scale", "isolation", "schedule"], f.kind),
        o=options(outcomes, f.outcome),
        r=options([c.value for c in ReasonCode], f.reason_code),
        s=since,
    )
    table_rows = [
        [
            _ts(d.at),
            d.group_name,
            d.kind,
            d.action,
            d.instance_id or ("" if d.target is None else d.target),
            d.outcome + (" (dry run)" if d.dry_run else ""),
            d.error or d.reason or "",
            _inputs(d.inputs),
            d.request_id or "-",
            d.client_token or "-",
        ]
        for d in rows
    ]
    headers = [
        "at (UTC)",
        "group",
        "kind",
        "action",
        "target / instance",
        "outcome",
        "reason",
        "inputs",
        "request id",
        "ClientToken",
    ]
    more = render('<p><a href="{h}">older decisions</a></p>', h=more_link) if more_link else Safe("")
    return join(
        [
            form,
            render("<p>{n} decision(s) shown, newest first</p>", n=len(rows)),
            table(headers, table_rows, cls="decisions"),
            more,
        ]
    )


def _inputs(inputs: dict[str, Any] | None) -> Safe:
    if not inputs:
        return Safe("-")
    text = json.dumps(inputs, indent=1, sort_keys=True, default=str)
    return render("<details><summary>inputs</summary><pre>{t}</pre></details>", t=text)


# ---- sign-in and refusals ------------------------------------------------------------------------------


def signin_page(error: str = "", can_sign_in: bool = True) -> Safe:
    if not can_sign_in:
        return Safe(
            '<p class="error">No API token is configured (api.token or FLEET_API_TOKEN): the console is '
            "read-only and nobody can sign in.</p>"
        )
    err = render('<p class="error" role="alert">{e}</p>', e=error) if error else Safe("")
    return render(
        "{err}<p>Sign in with the service's API token to acknowledge, isolate, release and pause. "
        "Your name is "
        "recorded with every action.</p>"
        '<form method="post" action="/console/signin">'
        '<p><label>your name <input name="name" required maxlength="64" pattern="[A-Za-z0-9._@+\\-]+" '
        'autocomplete="username"></label></p>'
        '<p><label>API token <input name="token" type="password" required autocomplete="current-password">'
        '</label></p><p><button type="submit">sign in</button></p></form>',
        err=err,
    )


def refusal(message: str) -> Safe:
    return render(
        '<p class="error" role="alert">{m}</p><p><a href="/console/">back to the fleet</a></p>', m=message
    )
