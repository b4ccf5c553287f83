"""Random operation sequences against the ESS model (hooks, economical mode, outside ECS stops, deletions and
reboots included): nothing but API errors may come out, the books stay consistent, and groups with desired
capacity settle on it once time passes."""

from __future__ import annotations

import contextlib
import random

import pytest

from fleet.testing import AliyunError, FakeCloud, mock_aliyun
from fleet.testing.ess.models import COUNTED_STATES

from .conftest import START

OPS = (
    "scale",
    "scale",
    "advance",
    "advance",
    "standby",
    "exit",
    "protect",
    "unprotect",
    "remove",
    "remove_keep",
    "complete",
    "ecs_stop",
    "ecs_delete",
    "reboot",
    "modify",
    "tick",
)


def _step(cloud: FakeCloud, group_id: str, rng: random.Random) -> None:
    ess, ecs = cloud.ess, cloud.ecs
    members = list(ess.groups[group_id].instance_ids)
    pick = rng.choice(members) if members else None
    op = rng.choice(OPS)
    if op == "scale":
        ess.scale(group_id, "TotalCapacity", rng.randint(0, 10), min_adjustment_magnitude=None, cause="fuzz")
    elif op == "advance":
        cloud.advance(rng.choice([1, 5, 15, 30, 61]))
    elif op == "tick":
        cloud.tick()
    elif op == "modify":
        ess.modify_scaling_group(group_id, min_size=rng.randint(0, 2), max_size=rng.randint(3, 10))
    elif op == "complete":
        pending = [a for a in ess.lifecycle_actions.values() if a.status == "Pending"]
        if pending:
            action = rng.choice(pending)
            ess.complete_lifecycle_action(
                action.hook_id, action.token, rng.choice(["CONTINUE", "ABANDON", "ROLLBACK"])
            )
    elif pick is None:
        return
    elif op == "standby":
        ess.enter_standby(group_id, [pick])
    elif op == "exit":
        ess.exit_standby(group_id, [pick])
    elif op in ("protect", "unprotect"):
        ess.set_instances_protection(group_id, [pick], op == "protect")
    elif op in ("remove", "remove_keep"):
        ess.remove_instances(
            group_id,
            [pick],
            remove_policy=rng.choice(["recycle", "release"]),
            decrease_desired=op == "remove",
            ignore_invalid=False,
        )
    elif pick in ecs.instances:
        if op == "ecs_stop":
            ecs.stop_instance(pick)
        elif op == "ecs_delete":
            ecs.delete_instance(pick, force=True)
        else:
            ecs.reboot_instance(pick)


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_keep_the_books_and_settle(seed: int) -> None:
    rng = random.Random(seed)
    with mock_aliyun(seed=seed, start=START) as cloud:
        ess = cloud.ess
        desired = rng.choice([None, 2])
        group_id = cloud.create_group_for_tests(
            max_size=10, desired_capacity=desired, scaling_policy=rng.choice(["recycle", "release"])
        )
        for transition in ("SCALE_OUT", "SCALE_IN"):
            if rng.random() < 0.5:
                ess.create_lifecycle_hook(group_id, transition, transition, "CONTINUE", 60, None, None)
        group = ess.groups[group_id]
        for _ in range(150):
            with contextlib.suppress(AliyunError):  # refusals are part of the model
                _step(cloud, group_id, rng)
            assert ess.capacities(group)["TotalCapacity"] == len(group.instance_ids)
            assert all(ess.instances[i].group_id == group_id for i in group.instance_ids)
        cloud.advance(3600)
        if group.desired_capacity is not None:
            counted = [i for i in ess.group_instances(group) if i.lifecycle_state in COUNTED_STATES]
            stuck_out = [
                i for i in ess.group_instances(group) if i.lifecycle_state in ("Standby", "Protected")
            ]
            assert len(counted) == max(group.desired_capacity, len(stuck_out))
        assert not ess.in_progress.get(group_id)
