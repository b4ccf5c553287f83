"""The capacity manager's ladder moves against the in-process fake through the real ESS SDK."""

from __future__ import annotations

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


def test_a_retry_whose_count_is_clipped_to_max_size_at_max_size_writes_no_capacity_and_moves_on(tmp_path):
    """Back from the faster type to the slower one, the count grows (6 for 4 at half the capacity), but the
    group is already at its max_size of 4: ESS would answer IncorrectCapacity.NoChange, so nothing is written,
    and the ladder moves (it used to fail the same way every tick, never saving its step)."""
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
            result = manager.tick(observation, {"chat": 4}, now, fence=lambda: True)
            assert result.errors == []
            assert [m.kind for m in result.moves] == [MoveKind.RETRY]
            assert result.moves[0].target == 6
            assert not [a for _, a in cloud.calls if a == "ScaleWithAdjustment"]
            assert cs.load_memory(store, "chat").rung == 0  # the step was saved
            assert cloud.ess.groups[gid].desired_capacity == 4
        finally:
            store.close()


def test_a_retry_to_the_size_the_group_already_has_is_not_an_error(tmp_path):
    """The plan's target (3) is not what the group holds (4, its max_size: the plan's write did not happen,
    e.g. a paused group), and the retry's count clips to 4: ESS answers IncorrectCapacity.NoChange, which is
    nothing to do, not a failure of the ladder."""
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
            result = manager.tick(observation, {"chat": 3}, now, fence=lambda: True)
            assert result.errors == []
            assert [m.kind for m in result.moves] == [MoveKind.RETRY]
            assert cs.load_memory(store, "chat").rung == 0
        finally:
            store.close()
