"""The capacity manager's ladder moves against the in-process fake through the real ESS SDK."""

from __future__ import annotations

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service import capacity_store as cs
from fleet.service.capacity import CapacityManager
from fleet.service.observe import Observer
from fleet.service.store import open_store
from fleet.testing import mock_aliyun
from policies.capacity import CapacityMemory, MoveKind

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
FAST = RetryPolicy(attempts=1, sleep=lambda s: None)
A10, L20 = "ecs.gn7i-c8g1.2xlarge", "ecs.gn8is.2xlarge"


def _setup(tmp_path, cloud, gid):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f'region: {REGION}\naccount_id: "{cloud.account_id}"\ngroups:\n'
        f"  - name: chat\n    scaling_group_id: {gid}\n    min_size: 1\n    max_size: 4\n"
        f"    instance_types: [{A10}, {L20}]\n"
    )
    spec = load_config(path, env={}).groups[0]
    clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
    return spec, clients, open_store(f"sqlite:///{tmp_path / 'f.db'}")


def _manager(clients, store, spec) -> CapacityManager:
    """The slower A10 first, then the L20 at 1.5 times its capacity per instance."""
    return CapacityManager(
        clients.ess,
        store,
        [spec],
        service="fleet",
        dry_run=False,
        notify=lambda a: None,
        capacity_of={A10: 1.0, L20: 1.5}.__getitem__,
    )


@pytest.mark.parametrize("plan_target", [4, 3])
def test_a_retry_clipped_to_max_size_at_max_size_is_nothing_to_write_and_the_ladder_moves(
    tmp_path, plan_target
):
    """Back from the faster type to the slower one, the count grows (6 for 4 on the faster one), but
    the group already holds its max_size of 4. With the plan's target at 4 nothing is written; with it at 3
    (the plan's write did not happen, e.g. a paused group) ESS answers IncorrectCapacity.NoChange, which is
    nothing to do. Either way the ladder's step is saved (it used to fail every tick, never saving it)."""
    with mock_aliyun() as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=4, desired_capacity=4, in_service=4, region_id=REGION
        )
        spec, clients, store = _setup(tmp_path, cloud, gid)
        try:
            manager = _manager(clients, store, spec)
            now = cloud.now()
            cs.save_memory(store, "chat", CapacityMemory(rung=1, moved_at=now), now)
            observation = Observer(clients, [spec]).observe(now)
            cloud.calls.clear()
            result = manager.tick(observation, {"chat": plan_target}, now, fence=lambda: True)
            assert result.errors == []
            assert [m.kind for m in result.moves] == [MoveKind.RETRY]
            assert result.moves[0].target > 4  # 6 for 4, 5 for 3, at 1.5 times the capacity
            writes = [a for _, a in cloud.calls if a == "ScaleWithAdjustment"]
            assert len(writes) == (0 if plan_target == 4 else 1)
            assert cs.load_memory(store, "chat").rung == 0  # the step was saved
            assert cloud.ess.groups[gid].desired_capacity == 4
        finally:
            store.close()
