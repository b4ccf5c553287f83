"""``policies.model.deep_copy``: what ``decide`` copies the history with instead of pydantic's deep copy. The
copy equals the original, keeps which fields were set, and shares nothing that can change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from policies.model import (
    BreakerState,
    ForecastState,
    GroupHistory,
    History,
    Incident,
    IncidentState,
    PendingForecast,
    ReasonCode,
    Recommendation,
    TimelineEntry,
    Track,
    deep_copy,
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def rich_history() -> History:
    incident = Incident(
        incident_id="inc-1",
        group="chat",
        instance_id="i-1",
        rule="gpu_overheat",
        kind="metric",
        action="reboot",
        state=IncidentState.ISOLATED,
        detected_at=NOW,
        respond_by=NOW + timedelta(minutes=15),
        isolate_by=NOW + timedelta(hours=4),
        failures={"reboot": 1},
        evidence={"value": 91.0, "metric": "gpu_temperature_c"},
        timeline=[TimelineEntry(at=NOW, state=IncidentState.DETECTED, reason=ReasonCode.HOLD, detail="91 C")],
    )
    forecast = ForecastState(
        pending=[
            PendingForecast(due=NOW + timedelta(minutes=k), mean_rps=k, upper_rps=2.0 * k) for k in range(5)
        ],
        ratios=[0.9, 1.1],
        covered=[True, False],
        correction=0.97,
        targets=[Recommendation(at=NOW, serving=4)],
        last_at=NOW,
    )
    gh = GroupHistory(
        last_target=4,
        recommendations=[Recommendation(at=NOW, serving=4)],
        tracks={"out:queue": Track(since=NOW, last_at=NOW, count=3)},
        incidents=[incident],
        breaker=BreakerState(open=True, opened_at=NOW, reason="3 isolations"),
        applied_operator_actions=["req-1"],
        forecast=forecast,
    )
    return History(updated_at=NOW, groups={"chat": gh})


def _walk(value: Any) -> list[Any]:
    """Every model, list and dict reachable from ``value``."""
    out: list[Any] = []
    if hasattr(value, "__pydantic_fields__"):
        out.append(value)
        for v in value.__dict__.values():
            out += _walk(v)
    elif isinstance(value, list):
        out.append(value)
        for v in value:
            out += _walk(v)
    elif isinstance(value, dict):
        out.append(value)
        for v in value.values():
            out += _walk(v)
    return out


def test_the_copy_equals_the_original_and_pydantics_deep_copy():
    h = rich_history()
    copied = deep_copy(h)
    assert copied == h
    assert copied == h.model_copy(deep=True)
    assert copied.model_dump(mode="json") == h.model_dump(mode="json")
    # which fields were set is kept (model_dump(exclude_unset=True) and the store's JSON rely on it)
    assert copied.model_dump(exclude_unset=True) == h.model_dump(exclude_unset=True)


def test_the_copy_shares_no_model_list_or_dict_with_the_original():
    h = rich_history()
    originals = {id(x) for x in _walk(h)}
    copies = _walk(deep_copy(h))
    assert len(copies) == len(_walk(h))
    assert not [x for x in copies if id(x) in originals]


def test_changing_the_copy_leaves_the_original_as_it_was():
    h = rich_history()
    before = h.model_dump(mode="json")
    c = deep_copy(h)
    gh = c.groups["chat"]
    gh.tracks["out:queue"].count = 99
    gh.incidents[0].timeline.append(TimelineEntry(at=NOW, state=IncidentState.CLOSED, reason=ReasonCode.HOLD))
    gh.incidents[0].failures["reboot"] = 5
    gh.forecast.pending.pop()
    gh.forecast.ratios.append(3.0)
    gh.breaker.open = False
    c.groups["other"] = GroupHistory()
    assert h.model_dump(mode="json") == before
