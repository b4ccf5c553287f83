"""Time formatting as the APIs print it (UTC, ``Z`` suffix)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def iso_s(ts: float) -> str: ...
@overload
def iso_s(ts: None) -> None: ...
@overload
def iso_s(ts: float | None) -> str | None: ...
def iso_s(ts: float | None) -> str | None:
    """``YYYY-MM-DDThh:mm:ssZ``. ESS documents minute precision; seconds are kept so boot times are
    visible."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@overload
def iso_min(ts: float) -> str: ...
@overload
def iso_min(ts: None) -> None: ...
@overload
def iso_min(ts: float | None) -> str | None: ...
def iso_min(ts: float | None) -> str | None:
    """``YYYY-MM-DDThh:mmZ`` (ESS LaunchTime and friends)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%MZ")


def to_dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
