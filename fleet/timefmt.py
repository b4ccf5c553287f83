"""Instants as text, one way for the whole shell: ISO 8601 in (``Z`` or an offset), UTC with ``Z`` out.

The fake cloud (``fleet.testing``) keeps its own formatters: it copies the cloud's wire formats and imports
nothing else of ``fleet``.
"""

from __future__ import annotations

from datetime import UTC, datetime

# The instants the shell accepts (``--at``, snapshots, history rows): the policy's windows, timers and
# forecasts reach days around an instant, and Python's datetimes end at year 9999
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def outside_calendar(dt: datetime) -> str | None:
    """Why ``dt`` (aware) is too early or too late to plan around, in a few words; None when it is not."""
    if EARLIEST <= dt <= LATEST:
        return None
    return f"{dt.isoformat()} is outside {EARLIEST.year}..{LATEST.year - 1}"


def isoformat(dt: datetime) -> str:
    """``dt`` in UTC as ISO 8601 with a ``Z`` suffix, e.g. ``2026-03-02T10:00:00Z``."""
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """An ISO 8601 instant (``Z`` or an offset); a time without a zone stays naive. Raises ``ValueError``."""
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))


def parse_iso_utc(text: str) -> datetime:
    """As :func:`parse_iso`, a time without a zone read as UTC."""
    dt = parse_iso(text)
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
