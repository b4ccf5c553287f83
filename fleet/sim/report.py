"""A self-contained HTML report of one simulation: inline SVG plots, no plotting library, no external assets.

Three stacked time plots share the x axis (hours of the run, local time of the schedule): the load (requests
per minute, rejected ones in red), the capacity (desired vs instances in the group vs instances serving,
Standby shaded), and P99 TTFT per minute against the SLO (log scale; minutes over the SLO in red). Fault
injections and incidents are drawn as vertical markers across all three, and listed in a table under the plots
with their detection, response and isolation times. Then the planning plots of
:mod:`fleet.sim.report_planning` (demand against its forecast, ordered capacity against the oracle's, the
cost curve) and, at the end, the timeline of every decision with its reason.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from fleet.sim.types import MinutePoint, SimResult
from fleet.sim.world import injected
from fleet.timefmt import parse_iso

# The incidents table's columns (the summary's incident fields), in order.
INCIDENT_COLUMNS = ("instance_id", "cause", "detected_at", "responded_at", "isolated_at", "action", "outcome")

W, H = 960, 200  # one plot's size in SVG user units
ML, MR, MT, MB = 60, 20, 16, 26  # margins


def _fmt(v: float) -> str:
    return f"{v:.1f}"


class _Plot:
    """Coordinates of one plot: minutes on x, a linear or log value axis on y."""

    def __init__(
        self, minutes: int, y_max: float, *, log: bool = False, y_min: float = 0.0, x0: float = 0.0
    ) -> None:
        self.minutes = max(1, minutes)
        self.x0 = x0  # the first minute shown (a close-up starts later than the run)
        self.log = log
        self.y_min = y_min if not log else max(1e-9, y_min)
        self.y_max = max(y_max, self.y_min * 10 if log else self.y_min + 1)
        self.parts: list[str] = []

    def x(self, minute: float) -> float:
        return ML + (W - ML - MR) * (minute - self.x0) / self.minutes

    def y(self, v: float) -> float:
        if self.log:
            v = min(max(v, self.y_min), self.y_max)
            frac = (math.log10(v) - math.log10(self.y_min)) / (
                math.log10(self.y_max) - math.log10(self.y_min)
            )
        else:
            frac = (min(v, self.y_max) - self.y_min) / (self.y_max - self.y_min)
        return H - MB - (H - MT - MB) * frac

    def polyline(
        self,
        points: Sequence[tuple[float, float | None]],
        color: str,
        width: float = 1.5,
        step: bool = False,
        dash: str = "",
    ) -> None:
        runs: list[list[str]] = [[]]
        prev_y: float | None = None
        for m, v in points:
            if v is None:
                if runs[-1]:
                    runs.append([])
                prev_y = None
                continue
            x, y = self.x(m), self.y(v)
            if step and prev_y is not None:
                runs[-1].append(f"{_fmt(x)},{_fmt(prev_y)}")
            runs[-1].append(f"{_fmt(x)},{_fmt(y)}")
            prev_y = y
        style = f' stroke-dasharray="{dash}"' if dash else ""
        for run in runs:
            if len(run) > 1:
                self.parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="{width}"{style} '
                    f'points="{" ".join(run)}"/>'
                )

    def bars(self, points: Sequence[tuple[float, float]], color: str) -> None:
        w = max(0.5, (W - ML - MR) / self.minutes)
        for m, v in points:
            if v <= 0:
                continue
            y = self.y(v)
            self.parts.append(
                f'<rect x="{_fmt(self.x(m))}" y="{_fmt(y)}" width="{_fmt(w)}" '
                f'height="{_fmt(H - MB - y)}" fill="{color}"/>'
            )

    def hline(self, v: float, color: str, label: str) -> None:
        y = self.y(v)
        self.parts.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{_fmt(y)}" y2="{_fmt(y)}" stroke="{color}" '
            f'stroke-dasharray="6 4"/><text x="{W - MR - 4}" y="{_fmt(y - 4)}" text-anchor="end" '
            f'fill="{color}" font-size="11">{html.escape(label)}</text>'
        )

    def marker(self, minute: float, color: str, label: str) -> None:
        if not self.x0 <= minute <= self.x0 + self.minutes:
            return
        x = self.x(minute)
        self.parts.append(
            f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{MT}" y2="{H - MB}" stroke="{color}" '
            f'stroke-width="1.2" stroke-dasharray="3 3"><title>{html.escape(label)}</title></line>'
        )

    def render(self, title: str, start_local: datetime, y_label: str) -> str:
        axes = [
            f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="#fafafa" '
            f'stroke="#ccc"/>'
        ]
        span = self.minutes
        step = 10 if span <= 120 else 60 if span <= 360 else 120 if span <= 1440 else 360
        m = math.ceil(self.x0 / step) * step
        while m <= self.x0 + span + 1e-9:
            x = self.x(m)
            stamp = (start_local + timedelta(minutes=m)).strftime("%H:%M")
            axes.append(
                f'<line x1="{_fmt(x)}" x2="{_fmt(x)}" y1="{H - MB}" y2="{H - MB + 4}" stroke="#888"/>'
                f'<text x="{_fmt(x)}" y="{H - 8}" text-anchor="middle" font-size="10" fill="#555">'
                f"{stamp}</text>"
            )
            m += step
        for frac in (0.0, 0.5, 1.0):
            if self.log:
                v = 10 ** (math.log10(self.y_min) + frac * (math.log10(self.y_max) - math.log10(self.y_min)))
            else:
                v = self.y_min + frac * (self.y_max - self.y_min)
            y = self.y(v)
            axes.append(
                f'<text x="{ML - 6}" y="{_fmt(y + 4)}" text-anchor="end" font-size="10" fill="#555">'
                f"{v:,.0f}</text>"
            )
        axes.append(
            f'<text x="12" y="{(H - MB + MT) / 2}" font-size="11" fill="#333" '
            f'transform="rotate(-90 12 {(H - MB + MT) / 2})" text-anchor="middle">'
            f"{html.escape(y_label)}</text>"
        )
        return (
            f'<h3>{html.escape(title)}</h3><svg viewBox="0 0 {W} {H}" width="100%" '
            f'xmlns="http://www.w3.org/2000/svg" role="img">{"".join(axes)}{"".join(self.parts)}</svg>'
        )


def _minute_of(result: SimResult, at: str | None) -> float | None:
    if not at:
        return None
    when = parse_iso(at)
    return (when - result.options.start).total_seconds() / 60.0


# Bars (arrivals, rejections, P99 per minute) span their minute; levels (capacity, temperature) are sampled at
# the minute's end, so they are drawn at ``minute + 1``.


def _markers(result: SimResult, plots: Sequence[_Plot]) -> None:
    for f in result.fault_log:
        m = f["at_s"] / 60.0
        for p in plots:
            p.marker(m, "#d62728", f"fault: {f['event']} on {f['instance_id']}")
    for inc in result.incidents:
        for key, color in (("detected_at", "#ff7f0e"), ("isolated_at", "#9467bd")):
            m = _minute_of(result, inc.get(key))
            if m is not None:
                for p in plots:
                    p.marker(
                        m, color, f"{key.replace('_at', '')}: {inc.get('instance_id')} ({inc.get('cause')})"
                    )


def temperature_limits_c(spec: Any) -> tuple[float, ...]:
    """The GPU temperatures the group's isolation rules act above (``gpu_temperature_c`` rules with ``above``;
    none when isolation is off): the lines the temperature plots draw."""
    from policies.metrics import GPU_TEMPERATURE_C

    isolation = getattr(spec, "isolation", None)
    if isolation is None or not isolation.enabled:
        return ()
    limits = {
        float(rule.above)
        for rule in isolation.rules
        if rule.metric == GPU_TEMPERATURE_C and rule.above is not None and rule.peer_factor is None
    }
    return tuple(sorted(limits))


def _temperature_plot(minutes: int, limits_c: Sequence[float], x0: float = 0.0) -> _Plot:
    """A temperature plot (20 C up) with a line at each isolation threshold, room left above the hottest."""
    plot = _Plot(minutes, max([110.0, *(t + 15.0 for t in limits_c)]), y_min=20.0, x0=x0)
    for t in limits_c:
        plot.hline(t, "#ff7f0e", f"{t:g} C isolation rule")
    return plot


def _closeup(result: SimResult, start_local: datetime, limits_c: Sequence[float] = ()) -> str:
    """Forty minutes around the first injected fault: the hottest GPU, the instances serving and isolated."""
    faults = injected(result.fault_log)
    if not faults or not result.series:
        return ""
    m0 = max(0.0, faults[0]["at_s"] / 60.0 - 10.0)
    span = 40
    pts = [p for p in result.series if m0 <= p.minute <= m0 + span]
    if not pts:
        return ""
    temp = _temperature_plot(span, limits_c, x0=m0)
    temp.polyline([(p.minute + 1, p.temperature_max_c) for p in pts], "#d62728", 2.0)
    cap = _Plot(span, max(max(p.in_service + p.pending + p.standby for p in pts), 1) * 1.2, x0=m0)
    cap.polyline([(p.minute + 1, float(p.serving)) for p in pts], "#17becf", 2.0, step=True)
    cap.polyline([(p.minute + 1, float(p.standby)) for p in pts], "#9467bd", 2.0, step=True)
    cap.polyline([(p.minute + 1, float(p.desired)) for p in pts], "#1f77b4", 1.5, step=True, dash="5 3")
    _markers(result, [temp, cap])
    for f in result.fault_log:
        if f["event"] == "rebooted":
            for p in (temp, cap):
                p.marker(f["at_s"] / 60.0, "#2ca02c", f"rebooted: {f['instance_id']}")
    return (
        "<h2>Incident close-up</h2><p>Forty minutes around the first injected fault: the fault (red), the "
        "incident detected (orange), the instance isolated in Standby (purple), the ECS reboot (green).</p>"
        + temp.render("Hottest GPU temperature", start_local, "C")
        + cap.render(
            "Instances serving (cyan), in Standby (purple), desired (blue)", start_local, "instances"
        )
    )


def report_timezone(spec: Any, default: str = "Asia/Shanghai") -> str:
    """The clock the report reads in: the group's schedules' (their first one's timezone), so that a floor
    from 09:00 shows at 09:00; a group without schedules gets ``default``."""
    schedules = getattr(spec, "schedules", None) or ()
    return str(schedules[0].timezone) if schedules else default


def render_html(
    result: SimResult, timezone: str = "Asia/Shanghai", temperature_limits: Sequence[float] = ()
) -> str:
    """The whole report as one HTML string; ``temperature_limits`` (C) are the group's isolation thresholds
    (:func:`temperature_limits_c`), drawn on the temperature plots."""
    s: Sequence[MinutePoint] = result.series
    n = len(s)
    start_local = result.options.start.astimezone(ZoneInfo(timezone))
    load = _Plot(n, max([p.arrivals for p in s] + [1]) * 1.1)
    load.bars([(p.minute, float(p.arrivals)) for p in s], "#9ecae1")
    load.bars([(p.minute, float(p.rejected)) for p in s], "#d62728")
    cap_max = max([max(p.desired, p.in_service + p.pending + p.standby) for p in s] + [1]) * 1.15
    cap = _Plot(n, cap_max)
    cap.bars([(p.minute, float(p.in_service + p.pending + p.standby)) for p in s], "#e7e7e7")
    cap.polyline([(p.minute + 1, float(p.desired)) for p in s], "#1f77b4", 2.0, step=True)
    cap.polyline([(p.minute + 1, float(p.in_service)) for p in s], "#2ca02c", 1.5, step=True, dash="5 3")
    cap.polyline([(p.minute + 1, float(p.serving)) for p in s], "#17becf", 1.5, step=True)
    cap.polyline([(p.minute + 1, float(p.standby)) for p in s], "#9467bd", 1.5, step=True)
    slo = result.options.slo_ttft_ms
    ttft_vals = [p.ttft_p99_ms for p in s if p.ttft_p99_ms is not None and math.isfinite(p.ttft_p99_ms)]
    ttft = _Plot(n, max(ttft_vals + [slo * 4]) * 1.5, log=True, y_min=max(10.0, min(ttft_vals + [slo]) / 2))
    ttft.hline(slo, "#d62728", f"SLO {slo:.0f} ms")
    capped = [(p.minute, None if p.ttft_p99_ms is None else min(p.ttft_p99_ms, ttft.y_max)) for p in s]
    ttft.polyline(capped, "#444", 1.2)
    over = [(p.minute, ttft.y_max) for p in s if p.ttft_p99_ms is not None and p.ttft_p99_ms > slo]
    for m, _ in over:
        x = ttft.x(m)
        ttft.parts.append(
            f'<rect x="{_fmt(x)}" y="{MT}" width="{_fmt(max(0.5, (W - ML - MR) / max(1, n)))}" '
            f'height="6" fill="#d62728"/>'
        )
    temp = _temperature_plot(n, temperature_limits)
    temp.polyline([(p.minute + 1, p.temperature_max_c) for p in s], "#d62728", 1.5)
    temp.polyline([(p.minute + 1, p.gpu_util_avg_pct) for p in s], "#1f77b4", 1.0, dash="2 2")
    plots = [load, cap, ttft, temp]
    _markers(result, plots)
    closeup = _closeup(result, start_local, temperature_limits)
    from fleet.sim.report_planning import planning_sections, timeline_section

    planning = planning_sections(result, start_local)
    timeline = timeline_section(result, start_local)

    summary = result.summary
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in summary.items()
        if k not in ("incidents", "invariant_violations")
    )
    inc_rows = (
        "".join(
            "<tr>"
            + "".join(f"<td>{html.escape(str(inc.get(k, '')))}</td>" for k in INCIDENT_COLUMNS)
            + "</tr>"
            for inc in result.incidents
        )
        or f'<tr><td colspan="{len(INCIDENT_COLUMNS)}">none</td></tr>'
    )
    fault_rows = (
        "".join(
            f"<tr><td>{(start_local + timedelta(seconds=f['at_s'])).strftime('%H:%M:%S')}</td>"
            f"<td>{html.escape(str(f['instance_id']))}</td><td>{html.escape(str(f['event']))}</td></tr>"
            for f in result.fault_log
        )
        or '<tr><td colspan="3">none</td></tr>'
    )
    violations = summary.get("invariant_violations") or []
    inv = (
        "<p class=ok>No invariant violations.</p>"
        if not violations
        else "<ul>" + "".join(f"<li>{html.escape(json.dumps(v))}</li>" for v in violations) + "</ul>"
    )
    title = f"Fleet simulation: {result.workload} under {result.options.policy}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font-family:system-ui,sans-serif;max-width:1000px;margin:24px auto;color:#222}}
table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ddd;padding:3px
8px;font-size:13px;text-align:left}}
h3{{margin:18px 0 4px}}.legend span{{margin-right:14px;font-size:12px}}.ok{{color:#2ca02c}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Group <b>{html.escape(result.group_name)}</b>, {result.hardware.model} on {result.hardware.instance_type}
({result.hardware.gpus_per_instance} x {result.hardware.gpu}), {result.options.hours:g} h from
{start_local.strftime("%a %Y-%m-%d %H:%M")} ({html.escape(timezone)}); simulated in {result.wall_s:.1f} s.</p>
{load.render("Load: requests per minute (rejected in red)", start_local, "req/min")}
<div class=legend><span style="color:#1f77b4">&#9632; desired</span><span style="color:#2ca02c">&#9632;
InService</span>
<span style="color:#17becf">&#9632; serving (loaded)</span><span style="color:#9467bd">&#9632; Standby
(isolated)</span>
<span style="color:#999">&#9632; all instances</span><span style="color:#d62728">| fault</span>
<span style="color:#ff7f0e">| incident detected</span><span style="color:#9467bd">| isolated</span></div>
{cap.render("Capacity: desired vs actual instances", start_local, "instances")}
{ttft.render("P99 TTFT per minute vs SLO (log scale; red: minutes over the SLO)", start_local, "ms")}
{temp.render("Hottest GPU temperature (red) and average GPU utilization % (blue)", start_local, "C / %")}
{planning}
{closeup}
<h2>Summary</h2><table>{rows}</table>
<h2>Incidents</h2><table><tr><th>instance</th><th>cause</th><th>detected</th><th>responded</th><th>isolated</th>
<th>action</th><th>outcome</th></tr>{inc_rows}</table>
<h2>Injected faults</h2><table><tr><th>time</th><th>instance</th><th>fault</th></tr>{fault_rows}</table>
<h2>Invariants</h2>{inv}
{timeline}
</body></html>
"""
