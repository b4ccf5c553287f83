"""A latency-throughput plot as a small self-contained SVG (no plotting library): P99 TTFT, TPOT and
end-to-end latency against offered load on a log scale, with the knee and the SLOs marked."""

from __future__ import annotations

import math
from html import escape

from sizing.latency import KneeSweep

_W, _H = 720, 420
_L, _R, _T, _B = 70, 170, 40, 50  # margins: room for the axis labels and the legend
_SERIES = (
    ("ttft_p99_ms", "P99 TTFT", "#1f77b4"),
    ("tpot_p99_ms", "P99 TPOT", "#2ca02c"),
    ("e2e_p99_ms", "P99 end-to-end", "#d62728"),
)


def latency_throughput_svg(
    sweep: KneeSweep, title: str, slo_ttft_p99_ms: float | None = None, slo_tpot_p99_ms: float | None = None
) -> str:
    """The SVG document (a string) for ``sweep``."""
    xs = [p.rate_rps for p in sweep.points]
    values = [getattr(p, attr) for p in sweep.points for attr, _, _ in _SERIES]
    values += [v for v in (slo_ttft_p99_ms, slo_tpot_p99_ms) if v]
    positive = [v for v in values if v > 0] or [1.0]
    y_lo = 10 ** math.floor(math.log10(min(positive)))
    y_hi = 10 ** math.ceil(math.log10(max(positive)))
    if y_hi <= y_lo:
        y_hi = y_lo * 10
    x_hi = max(xs) * 1.05 if xs and max(xs) > 0 else 1.0
    pw, ph = _W - _L - _R, _H - _T - _B

    def px(x: float) -> float:
        return _L + pw * x / x_hi

    def py(y: float) -> float:
        y = max(y, y_lo)
        return _T + ph * (1 - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<text x="{_L}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{_L}" y="{_T}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>',
    ]
    decade = y_lo
    while decade <= y_hi * 1.0001:
        y = py(decade)
        out.append(f'<line x1="{_L}" y1="{y:.1f}" x2="{_L + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{_L - 6}" y="{y + 4:.1f}" text-anchor="end">{decade:g}</text>')
        decade *= 10
    for i in range(6):
        x = x_hi * i / 5
        out.append(f'<text x="{px(x):.1f}" y="{_T + ph + 18}" text-anchor="middle">{x:.3g}</text>')
    out.append(
        f'<text x="{_L + pw / 2}" y="{_H - 10}" text-anchor="middle">offered load per instance (req/s)</text>'
    )
    out.append(
        f'<text x="16" y="{_T + ph / 2}" text-anchor="middle" transform="rotate(-90 16 {_T + ph / 2})">'
        "latency (ms, log scale)</text>"
    )
    for slo, label in ((slo_ttft_p99_ms, "TTFT SLO"), (slo_tpot_p99_ms, "TPOT SLO")):
        if slo:
            y = py(slo)
            out.append(
                f'<line x1="{_L}" y1="{y:.1f}" x2="{_L + pw}" y2="{y:.1f}" '
                'stroke="#888" stroke-dasharray="6 4"/>'
            )
            out.append(
                f'<text x="{_L + pw - 4}" y="{y - 4:.1f}" text-anchor="end" fill="#666">{label}</text>'
            )
    knee_x = px(sweep.knee_rate_rps)
    out.append(
        f'<line x1="{knee_x:.1f}" y1="{_T}" x2="{knee_x:.1f}" y2="{_T + ph}" '
        'stroke="#9467bd" stroke-dasharray="3 3"/>'
    )
    out.append(
        f'<text x="{knee_x + 4:.1f}" y="{_T + 14}" fill="#9467bd">knee {sweep.knee_rate_rps:.3g} req/s</text>'
    )
    for n, (attr, label, color) in enumerate(_SERIES):
        pts = " ".join(f"{px(p.rate_rps):.1f},{py(getattr(p, attr)):.1f}" for p in sweep.points)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for p in sweep.points:
            out.append(
                f'<circle cx="{px(p.rate_rps):.1f}" cy="{py(getattr(p, attr)):.1f}" r="2.5" fill="{color}"/>'
            )
        ly = _T + 20 + 20 * n
        out.append(
            f'<line x1="{_W - _R + 15}" y1="{ly}" x2="{_W - _R + 40}" y2="{ly}" '
            f'stroke="{color}" stroke-width="2"/>'
        )
        out.append(f'<text x="{_W - _R + 46}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
