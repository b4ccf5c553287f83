"""The snapshot JSON format: a window survives the round trip and bad files name their field."""

from __future__ import annotations

import pytest
from diagnose_windows import make_window

from fleet.diagnose.model import SnapshotError, window_from_json, window_to_json, windows_from_json
from fleet.diagnose.rules import diagnose


def test_window_round_trips_through_json():
    w = make_window(changes={"i-b": {"gpu_temperature_c": 91.0, "gpu_sm_clock_ratio": 0.6}})
    again = window_from_json(window_to_json(w))
    assert again.group == w.group and again.start == w.start and again.end == w.end
    assert [i.metrics for i in again.instances] == [i.metrics for i in w.instances]
    assert [f.kind for f in diagnose(again)] == [f.kind for f in diagnose(w)]


def test_several_windows_under_windows_key():
    other = make_window(ids=("i-x",))
    other.group.name = "batch"
    data = {"windows": [window_to_json(make_window()), window_to_json(other)]}
    assert [len(w.instances) for w in windows_from_json(data)] == [4, 1]


def test_epoch_times_and_null_values_are_accepted():
    w = window_from_json(
        {
            "group": {"name": "g"},
            "start": 1_700_000_000,
            "end": 1_700_000_600_000,
            "instances": [
                {
                    "instance_id": "i-1",
                    "metrics": {"queue_waiting": [[1_700_000_015, 3], [1_700_000_030, None]]},
                }
            ],
        }
    )
    assert (w.end - w.start).total_seconds() == 600
    assert w.instances[0].values("queue_waiting") == [3.0]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ([], "expected an object"),
        ({"group": {}, "start": 0, "end": 1}, "group"),
        ({"group": {"name": "g"}, "start": 5, "end": 1}, "end: must be after start"),
        ({"group": {"name": "g"}, "start": 0, "end": 9, "version": 2}, "version"),
        ({"group": {"name": "g"}, "start": 0, "end": 9, "instances": [{"metrics": {}}]}, "instances[0]"),
        ({"group": {"name": "g"}, "start": 0, "end": 9, "scale_outs": [{"from": 1}]}, "scale_outs[0]"),
    ],
)
def test_bad_snapshot_names_where(data, field):
    with pytest.raises(SnapshotError, match=None) as exc:
        window_from_json(data)
    assert field in str(exc.value)
