"""Property test of the ESS model: whatever sequence of scaling, standby, protection, removal and time passes,
capacities add up, desired stays within [Min, Max], and a group with desired capacity settles on it."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.testing import AliyunError, mock_aliyun
from fleet.testing.ess.models import CAPACITY_FIELDS, COUNTED_STATES

from .conftest import START

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("scale"), st.integers(0, 8)),
        st.tuples(st.just("advance"), st.sampled_from([1, 5, 15, 30, 120])),
        st.tuples(st.just("standby"), st.integers(0, 7)),
        st.tuples(st.just("exit_standby"), st.integers(0, 7)),
        st.tuples(st.just("protect"), st.integers(0, 7)),
        st.tuples(st.just("remove"), st.integers(0, 7)),
        st.tuples(st.just("min"), st.integers(0, 3)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, recycle=st.booleans())
def test_capacities_add_up_and_desired_is_reached(ops: list[tuple[str, int]], recycle: bool) -> None:
    with mock_aliyun(boot_seconds=30, start=START) as cloud:
        ess = cloud.ess
        group_id = cloud.create_group_for_tests(
            min_size=0, max_size=8, desired_capacity=2, scaling_policy="recycle" if recycle else "release"
        )
        group = ess.groups[group_id]
        kept: set[str] = set()  # Standby or Protected by us: must never be scaled in
        for op, arg in ops:
            members = list(group.instance_ids)
            pick = members[arg % len(members)] if members else None
            try:
                if op == "scale":
                    ess.scale(group_id, "TotalCapacity", arg, min_adjustment_magnitude=None, cause="p")
                elif op == "advance":
                    cloud.advance(arg)
                elif op == "standby" and pick:
                    ess.enter_standby(group_id, [pick])
                    kept.add(pick)
                elif op == "exit_standby" and pick:
                    ess.exit_standby(group_id, [pick])
                    kept.discard(pick)
                elif op == "protect" and pick:
                    ess.set_instances_protection(group_id, [pick], True)
                    kept.add(pick)
                elif op == "remove" and pick:
                    ess.remove_instances(
                        group_id, [pick], remove_policy="release", decrease_desired=True, ignore_invalid=False
                    )
                    kept.discard(pick)
                elif op == "min":
                    ess.modify_scaling_group(group_id, min_size=min(arg, group.desired_capacity or 0))
            except AliyunError:
                pass  # refusals are part of the model; the invariants below must hold regardless
            caps = ess.capacities(group)
            assert (
                caps["TotalCapacity"]
                == sum(caps[f] for f in CAPACITY_FIELDS.values())
                == len(group.instance_ids)
            )
            assert group.min_size <= (group.desired_capacity or 0) <= group.max_size
            assert kept <= set(group.instance_ids)
        cloud.advance(600)
        counted = [i for i in ess.group_instances(group) if i.lifecycle_state in COUNTED_STATES]
        kept_out = [i for i in ess.group_instances(group) if i.lifecycle_state in ("Standby", "Protected")]
        assert len(counted) == max(group.desired_capacity, len(kept_out))  # those are never scaled in
        assert all(
            i.lifecycle_state in ("InService", "Standby", "Protected", "Stopped")
            for i in ess.group_instances(group)
        )
        assert not ess.in_progress.get(group_id)


def test_rapid_rescaling_while_instances_boot_settles_without_recursion() -> None:
    # Scale-ins that take every booting instance of an earlier activity used to finish that activity midway
    # and re-enter the reconcile without end (found by concurrent clients against the server).
    with mock_aliyun(boot_seconds=30, start=START) as cloud:
        group_id = cloud.create_group_for_tests(max_size=30, desired_capacity=0)
        for target in [(i + k) % 20 + 1 for i in range(30) for k in range(8)]:
            with contextlib.suppress(AliyunError):  # IncorrectCapacity.NoChange
                cloud.ess.scale(
                    group_id, "TotalCapacity", target, min_adjustment_magnitude=None, cause="test"
                )
            cloud.tick()
        cloud.advance(600)
        group = cloud.ess.groups[group_id]
        assert cloud.ess.capacities(group)["ActiveCapacity"] == group.desired_capacity
        assert not cloud.ess.in_progress.get(group_id)


def test_desired_below_standby_and_protected_count_waits_instead_of_looping() -> None:
    with mock_aliyun(boot_seconds=30, start=START) as cloud:
        group_id = cloud.create_group_for_tests(max_size=5, desired_capacity=3, in_service=3)
        members = list(cloud.ess.groups[group_id].instance_ids)
        cloud.ess.enter_standby(group_id, members[:2])
        cloud.ess.set_instances_protection(group_id, members[2:], True)
        cloud.ess.scale(group_id, "TotalCapacity", 1, min_adjustment_magnitude=None, cause="test")
        cloud.advance(60)
        states = sorted(i.lifecycle_state for i in cloud.ess.group_instances(cloud.ess.groups[group_id]))
        assert (
            states == ["Protected", "Standby", "Standby"] and cloud.ess.groups[group_id].desired_capacity == 1
        )
