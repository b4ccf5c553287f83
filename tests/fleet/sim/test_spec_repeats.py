"""Workload and fault SPECs refuse what would otherwise be silently dropped or run as nonsense: a key given
twice (which value wins?), an XID code no GPU raises, a stock-out in an empty zone."""

from __future__ import annotations

import pytest

from fleet.sim.workload import WorkloadError, parse_workload_spec
from fleet.sim.world import MAX_XID, FaultSpecError, parse_fault_spec


def test_a_workload_key_given_twice_is_refused():
    with pytest.raises(WorkloadError, match="peak is given twice"):
        parse_workload_spec("servegen:m-large,peak=1,peak=2")
    assert parse_workload_spec("servegen:m-large,peak=2").params["peak"] == "2"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("overheat,at=5m,at=6m", "at is given twice"),
        ("xid:-1,at=5m", "between 1 and"),
        (f"xid:{MAX_XID + 1},at=5m", "between 1 and"),
        ("stockout:ecs.gn7i-2x.8xlarge,zone=,at=1h,for=1h", "zone= needs a zone id"),
    ],
)
def test_fault_specs_refuse_repeats_impossible_xids_and_empty_zones(text: str, fragment: str):
    with pytest.raises(FaultSpecError, match=fragment):
        parse_fault_spec(text)


def test_real_xids_and_zones_still_parse():
    assert parse_fault_spec("xid:79,at=3h").xid == 79
    fault = parse_fault_spec("stockout:ecs.gn7i-2x.8xlarge,zone=cn-hangzhou-h,at=1h,for=1h")
    assert fault.zone == "cn-hangzhou-h"
