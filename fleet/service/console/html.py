"""Escaped HTML building: every value interpolated into a page goes through :func:`render`, which escapes it
unless it is already :class:`Safe` (markup this package built). Store data (group names, reasons, incident
causes, operator names) is never written into a page any other way.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any


class Safe(str):
    """Markup built by this package; :func:`render` inserts it as is."""

    __slots__ = ()


def esc(value: Any) -> Safe:
    """``value`` as text: escaped for element content and quoted attributes alike."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape("" if value is None else str(value), quote=True))


def render(template: str, **values: Any) -> Safe:
    """``template.format(**values)`` with every value escaped unless Safe; templates are literals."""
    return Safe(template.format(**{k: esc(v) for k, v in values.items()}))


def join(parts: Iterable[Any], sep: str = "") -> Safe:
    """Concatenate fragments, escaping those that are not Safe."""
    return Safe(sep.join(esc(p) for p in parts))


def attrs_selected(current: str | None, value: str) -> Safe:
    return Safe(" selected") if current == value else Safe("")


def options(values: Iterable[str], current: str | None, blank: str = "any") -> Safe:
    """``<option>`` elements for a filter ``<select>``, the current one selected."""
    out = [render('<option value="">{b}</option>', b=blank)]
    for v in values:
        out.append(render('<option value="{v}"{sel}>{v}</option>', v=v, sel=attrs_selected(current, v)))
    return join(out)


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]], cls: str = "") -> Safe:
    """A ``<table>``: header texts escaped, cells escaped unless Safe."""
    head = join(render("<th>{h}</th>", h=h) for h in headers)
    body = join(
        render("<tr>{cells}</tr>", cells=join(render("<td>{c}</td>", c=c) for c in row)) for row in rows
    )
    return render(
        '<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
        cls=cls,
        head=head,
        body=body,
    )
