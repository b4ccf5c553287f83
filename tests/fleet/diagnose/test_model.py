"""The snapshot JSON format: a window survives the round trip and bad files name their field."""

from __future__ import annotations

from datetime import timedelta

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
        ({"group": {"name": "g", "max_num_batched_tokens": 0}, "start": 0, "end": 9}, "at least 16 tokens"),
        ({"group": {"name": "g", "max_num_batched_tokens": 512.5}, "start": 0, "end": 9}, "whole number"),
        (
            {"group": {"name": "g", "max_num_batched_tokens": 64, "max_num_seqs": 128}, "start": 0, "end": 9},
            "max_num_batched_tokens: 64 is below max_num_seqs 128",
        ),
    ],
)
def test_bad_snapshot_names_where(data, field):
    with pytest.raises(SnapshotError, match=None) as exc:
        window_from_json(data)
    assert field in str(exc.value)


def _one_instance(metrics: dict) -> dict:
    return {
        "group": {"name": "g"},
        "start": 1_700_000_000,
        "end": 1_700_000_600,
        "instances": [{"instance_id": "i-1", "metrics": metrics}],
    }


def test_samples_a_metric_cannot_take_are_dropped_and_listed_in_errors():
    w = window_from_json(
        _one_instance(
            {
                "queue_waiting": [[1_700_000_015, -5], [1_700_000_030, 3]],
                "gpu_util_pct": [[1_700_000_015, 140], [1_700_000_030, 97]],
                "gpu_temperature_c": [[1_700_000_015, -40], [1_700_000_030, 70]],
            }
        )
    )
    inst = w.instances[0]
    assert inst.values("queue_waiting") == [3.0] and inst.values("gpu_util_pct") == [97.0]
    assert inst.values("gpu_temperature_c") == [70.0]
    at = "(the first: {} at 2023-11-14T22:13:35Z)"
    assert w.errors == [
        f"i-1 queue_waiting: 1 sample(s) below 0 dropped as invalid {at.format(-5)}",
        f"i-1 gpu_util_pct: 1 sample(s) outside 0..100 dropped as invalid {at.format(140)}",
        f"i-1 gpu_temperature_c: 1 sample(s) below 0 dropped as invalid {at.format(-40)}",
    ]


def test_a_metric_diagnosis_does_not_know_keeps_its_negative_samples():
    w = window_from_json(_one_instance({"my_gauge": [[1_700_000_015, -5]]}))
    assert w.instances[0].values("my_gauge") == [-5.0] and w.errors == []


def test_samples_outside_the_window_are_dropped_and_counted_in_errors():
    day = 86_400
    w = window_from_json(
        _one_instance(
            {
                "gpu_temperature_c": [
                    [1_700_000_015 + day, 95],
                    [1_700_000_030 + day, 95],
                    [1_700_000_300, 70],
                ],
                "queue_waiting": [[1_700_000_610, 1]],  # within one 15 s period of the end: kept
            }
        )
    )
    assert w.instances[0].metrics["gpu_temperature_c"] == [(w.start + timedelta(seconds=300), 70.0)]
    assert w.instances[0].values("queue_waiting") == [1.0]
    span = "2023-11-14T22:13:20Z - 2023-11-14T22:23:20Z"
    assert w.errors == [f"2 sample(s) of 1 instance(s) (i-1) outside the window {span} dropped"]
    assert "thermal_throttling" not in [f.kind for f in diagnose(w)]
