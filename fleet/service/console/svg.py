"""Inline SVG charts (no image files, no script): step lines of capacity and demand over a time window, and
markers for decisions. The simulator's report (fleet/sim/report.py) draws the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fleet.service.console.html import Safe, join, render

Point = tuple[datetime, float]


@dataclass(frozen=True)
class Series:
    label: str
    color: str
    points: Sequence[Point]
    dash: str = ""


@dataclass(frozen=True)
class Marker:
    at: datetime
    color: str
    title: str


@dataclass
class _Frame:
    start: datetime
    end: datetime
    width: float
    height: float
    pad: float
    top: float = 1.0
    extras: list[Safe] = field(default_factory=list)

    def x(self, at: datetime) -> float:
        span = max((self.end - self.start).total_seconds(), 1.0)
        frac = min(max((at - self.start).total_seconds() / span, 0.0), 1.0)
        return self.pad + frac * (self.width - 2 * self.pad)

    def y(self, v: float) -> float:
        return self.height - self.pad - (v / self.top) * (self.height - 2 * self.pad)


def _step_points(frame: _Frame, points: Sequence[Point]) -> str:
    """A step line: each value holds until the next point, the last one until the window's end."""
    out: list[str] = []
    last: float | None = None
    for at, v in points:
        if at > frame.end:
            break
        if last is not None:
            out.append(f"{frame.x(at):.1f},{frame.y(last):.1f}")
        out.append(f"{frame.x(max(at, frame.start)):.1f},{frame.y(v):.1f}")
        last = v
    if last is not None:
        out.append(f"{frame.x(frame.end):.1f},{frame.y(last):.1f}")
    return " ".join(out)


def _clip(points: Sequence[Point], start: datetime) -> list[Point]:
    """The points inside the window, led by the value in force at its start."""
    before = [p for p in points if p[0] < start]
    inside = [p for p in points if p[0] >= start]
    return ([(start, before[-1][1])] if before else []) + inside


def chart(
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    *,
    width: int = 160,
    height: int = 36,
    markers: Sequence[Marker] = (),
    axis: bool = False,
    title: str = "",
) -> Safe:
    """An inline ``<svg>``: a sparkline (small, no axis) or a plot (``axis=True``: y scale, legend)."""
    clipped = [(s, _clip(s.points, start)) for s in series]
    top = max([v for _, pts in clipped for _, v in pts] + [1.0])
    frame = _Frame(start, end, float(width), float(height), 4.0 if not axis else 28.0, top=top * 1.1)
    lines = []
    for s, pts in clipped:
        if not pts:
            continue
        lines.append(
            render(
                '<polyline fill="none" stroke="{c}" stroke-width="1.5" stroke-dasharray="{d}" points="{p}">'
                "<title>{t}</title></polyline>",
                c=s.color,
                d=s.dash or "none",
                p=_step_points(frame, pts),
                t=s.label,
            )
        )
    marks = [
        render(
            '<line x1="{x}" x2="{x}" y1="{y0}" y2="{y1}" stroke="{c}" stroke-width="1">'
            "<title>{t}</title></line>",
            x=Safe(f"{frame.x(m.at):.1f}"),
            y0=frame.pad,
            y1=height - frame.pad,
            c=m.color,
            t=m.title,
        )
        for m in markers
        if start <= m.at <= end
    ]
    decor = _axis(frame, series) if axis else Safe("")
    return render(
        '<svg class="chart" role="img" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{title}</title>{decor}{marks}{lines}</svg>',
        w=width,
        h=height,
        title=title or ", ".join(s.label for s in series),
        decor=decor,
        marks=join(marks),
        lines=join(lines),
    )


def _axis(frame: _Frame, series: Sequence[Series]) -> Safe:
    top = frame.top / 1.1
    ticks = []
    for v in (0.0, top / 2, top):
        ticks.append(
            render(
                '<text x="{x}" y="{y}" font-size="10" text-anchor="end" fill="#555">{v}</text>'
                '<line x1="{x0}" x2="{x1}" y1="{yl}" y2="{yl}" stroke="#ddd"/>',
                x=frame.pad - 4,
                x0=frame.pad,
                x1=frame.width - frame.pad,
                y=f"{frame.y(v) + 3:.1f}",
                yl=f"{frame.y(v):.1f}",
                v=f"{v:.3g}",
            )
        )
    labels = [
        render(
            '<text x="{x}" y="{y}" font-size="10" fill="{c}">{t}</text>',
            x=int(frame.pad + i * 130),
            y=int(frame.pad - 10),
            c=s.color,
            t=s.label,
        )
        for i, s in enumerate(series)
    ]
    times = render(
        '<text x="{x0}" y="{y}" font-size="10" fill="#555">{a}</text>'
        '<text x="{x1}" y="{y}" font-size="10" text-anchor="end" fill="#555">{b}</text>',
        x0=int(frame.pad),
        x1=int(frame.width - frame.pad),
        y=int(frame.height - 8),
        a=frame.start.strftime("%m-%d %H:%M UTC"),
        b=frame.end.strftime("%m-%d %H:%M UTC"),
    )
    return join([*ticks, *labels, times])
