"""The capacity manager's ladder moves against the in-process fake through the real ESS SDK."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.cloud.types import ScalingActivity
from fleet.config import load_config
from fleet.service import capacity_store as cs
from fleet.service.capacity import CapacityManager
from fleet.service.notify import Announcement
from fleet.service.observe import Observation, Observer
from fleet.service.store import Store, open_store
from fleet.testing import mock_aliyun
from policies.capacity import CapacityMemory, Move, MoveKind, Rung, SoldOut

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
FAST = RetryPolicy(attempts=1, sleep=lambda s: None)
A10, L20 = "ecs.gn7i-c8g1.2xlarge", "ecs.gn8is.2xlarge"


@dataclass
class Ladder:
    cloud: Any
    gid: str
    store: Store
    manager: CapacityManager
    now: datetime
    observe: Callable[[], Observation]
    notes: list[Announcement]
    ess: Any  # the ESS adapter, for writes the test makes itself


@contextmanager
def _ladder(
    tmp_path,
    held: int,
    max_size: int = 8,
    types=(A10, L20),
    memory: Callable[..., CapacityMemory] | None = None,
) -> Iterator[Ladder]:
    """A group of ``held`` InService instances laddered over ``types`` (the A10, and the L20 at 1.5 times its
    capacity per instance), its memory saved first where ``memory(manager, now)`` gives one; the fake's
    calls are cleared at each ``observe()``. ``max_size`` is ESS's MaxSize (the config's stays 8)."""
    with mock_aliyun() as cloud:
        gid = cloud.create_group_for_tests(
            name="chat",
            min_size=1,
            max_size=max_size,
            desired_capacity=held,
            in_service=held,
            region_id=REGION,
        )
        path = tmp_path / "fleet.yaml"
        path.write_text(
            f'region: {REGION}\naccount_id: "{cloud.account_id}"\ngroups:\n'
            f"  - name: chat\n    scaling_group_id: {gid}\n    min_size: 1\n    max_size: 8\n"
            f"    instance_types: [{', '.join(types)}]\n"
        )
        spec = load_config(path, env={}).groups[0]
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
        notes: list[Announcement] = []
        try:
            manager = CapacityManager(
                clients.ess,
                store,
                [spec],
                service="fleet",
                dry_run=False,
                notify=notes.append,
                capacity_of={A10: 1.0, L20: 1.5}.__getitem__,
            )
            now = cloud.now()
            if memory is not None:
                cs.save_memory(store, "chat", memory(manager, now), now)
            observer = Observer(clients, [spec])

            def observe() -> Observation:
                observation = observer.observe(now)
                cloud.calls.clear()
                return observation

            yield Ladder(cloud, gid, store, manager, now, observe, notes, clients.ess)
        finally:
            store.close()


def _writes(cloud, action: str) -> int:
    return [a for _, a in cloud.calls].count(action)


def test_a_retry_back_to_the_plans_own_type_writes_no_count_and_the_ladder_moves(tmp_path):
    """Back from the faster L20 to the A10 the plan counts in: the plan's count is already in A10s, so
    nothing is folded and nothing is written, at max_size or not; the ladder's step is saved (it used to
    write a count of 6 for 4, which ESS refused at max_size, failing every tick without saving the step)."""
    with _ladder(tmp_path, 4, max_size=4, memory=lambda m, now: CapacityMemory(rung=1, moved_at=now)) as w:
        result = w.manager.fall_back(w.observe(), {"chat": 4}, w.now, fence=lambda: True)
        assert result.errors == []
        assert [m.kind for m in result.moves] == [MoveKind.RETRY] and result.counts == {}
        assert _writes(w.cloud, "ScaleWithAdjustment") == 0
        assert cs.load_memory(w.store, "chat").rung == 0  # the step was saved
        assert w.cloud.ess.groups[w.gid].desired_capacity == 4


def _moved_after_the_write(manager: CapacityManager, now: datetime) -> CapacityMemory:
    ladder = manager.ladders["chat"]
    move = Move(
        kind=MoveKind.FALL_BACK, from_rung=ladder[0], to_rung=ladder[1], reason="L20 sold out", target=5
    )
    out = SoldOut(instance_type=L20, zone=None, spot=False, until=now + timedelta(hours=1), attempts=1)
    return CapacityMemory(rung=1, sold_out=(out,), moved_at=now, unfolded=move, unfolded_extra=1)


@pytest.mark.parametrize(("plan_target", "count"), [(4, 5), (6, 7), (3, None)])
def test_a_move_made_after_the_write_gives_its_count_to_the_next_ticks_plan(tmp_path, plan_target, count):
    """A fall back from the L20 the plan counts in to the slower A10, made after a tick's write that asked
    for 4 with 2 held (the 2 missing L20s are 3 A10s: 5, one more than the plan's): the next tick's pass
    before the write says the count, the plan's target and that one more, writes no capacity itself (the
    plan's one write carries it) and forgets the move; a plan that now wants less than then gets none."""
    with _ladder(tmp_path, 2, types=(L20, A10), memory=_moved_after_the_write) as w:
        result = w.manager.fall_back(w.observe(), {"chat": plan_target}, w.now, fence=lambda: True)
        assert result.errors == [] and result.moves == []
        assert result.counts == ({} if count is None else {"chat": (count, "L20 sold out")})
        assert _writes(w.cloud, "ScaleWithAdjustment") == 0
        assert cs.load_memory(w.store, "chat").unfolded is None


def test_after_the_write_only_the_groups_it_raised_are_read_again(tmp_path):
    """The pass after the plan's write looks for a refusal of that write: a group it did not raise has no
    new activity to judge, and its activities are not read a second time in the tick."""
    with _ladder(tmp_path, 2) as w:
        observation = w.observe()
        for written, reads in ((set(), 0), ({"chat"}, 1)):
            w.cloud.calls.clear()
            w.manager.fall_back(observation, {"chat": 2}, w.now, fence=lambda: True, written=written)
            assert _writes(w.cloud, "DescribeScalingActivities") == reads


def _sold_out(*types: str) -> Callable[[CapacityManager, datetime], CapacityMemory]:
    """Memory of a group back on its first rung with ``types`` remembered sold out for the next 10 min."""

    def memory(manager: CapacityManager, now: datetime) -> CapacityMemory:
        until = now + timedelta(minutes=10)
        return CapacityMemory(
            sold_out=tuple(
                SoldOut(instance_type=t, zone=None, spot=False, until=until, attempts=2) for t in types
            )
        )

    return memory


def _open_stockout(w: Ladder) -> str:
    rec = cs.CapacityRecord(
        id="stockout-chat-1",
        service="fleet",
        group_name="chat",
        kind=cs.RecordKind.STOCKOUT,
        state=cs.RecordState.OPEN,
        opened_at=w.now,
        updated_at=w.now,
        instance_type=A10,
        detail="A10 sold out",
    )
    cs.open_record(w.store, rec, "fall_back", rec.detail)
    return rec.id


def test_a_group_left_on_its_first_rung_with_every_rung_sold_out_keeps_its_stockout_open(tmp_path):
    """Every rung sold out, the group stays on the first one and ESS retries it every minute: a tick without
    a new failure to judge is no sign of stock. It used to close the record ("back on the primary rung") and
    open a new one, with a critical notification, at each of ESS's retries."""
    with _ladder(tmp_path, 1, memory=_sold_out(A10, L20)) as w:
        record_id = _open_stockout(w)
        result = w.manager.fall_back(w.observe(), {"chat": 3}, w.now, fence=lambda: True)
        assert result.errors == [] and result.moves == []
        (record,) = cs.records(w.store)
        assert (record.id, record.state) == (record_id, cs.RecordState.OPEN)


def test_the_first_rung_closes_its_stockout_once_its_backoff_has_passed_with_nothing_pending(tmp_path):
    with _ladder(tmp_path, 3, memory=_sold_out(L20)) as w:
        _open_stockout(w)
        w.manager.fall_back(w.observe(), {"chat": 3}, w.now, fence=lambda: True)
        (record,) = cs.records(w.store)
        assert record.state == cs.RecordState.CLOSED


def test_running_out_of_rungs_is_announced_once_per_run_of_exhaustion(tmp_path):
    """A10 sold out took the group to the L20, which sells out too: the open record says the whole ladder is
    sold out, once, with a critical notification (it used to add an event at each of ESS's retries and never
    announce it, the record being open already)."""

    def on_l20(manager: CapacityManager, now: datetime) -> CapacityMemory:
        out = SoldOut(instance_type=A10, zone=None, spot=False, until=now + timedelta(hours=1), attempts=1)
        return CapacityMemory(rung=1, sold_out=(out,), moved_at=now - timedelta(hours=1))

    with _ladder(tmp_path, 1, memory=on_l20) as w:
        record_id = _open_stockout(w)
        w.cloud.set_stock(A10, 0)
        w.cloud.set_stock(L20, 0)
        w.ess.scale_to(w.gid, 3, "scale-out")
        for _ in range(2):
            w.manager.fall_back(w.observe(), {"chat": 3}, w.now, fence=lambda: True)
            assert cs.load_memory(w.store, "chat").rung == 1  # stays: nowhere to go
            w.cloud.advance(61)  # ESS tries again what stock refused, and fails again
        events = [e.kind for e in w.store.incident_events(record_id)]
        assert events == ["fall_back", "exhausted"]
        assert [(n.severity, n.title) for n in w.notes] == [
            ("critical", "chat: every rung of the ladder sold out")
        ]


def test_stopped_instances_of_economical_mode_are_not_counted_as_held_when_the_count_is_adjusted(tmp_path):
    """Economical mode: 2 L20s serve and 4 sit Stopped when the tick observes the group. Its plan's scale-out
    to 5 gets none (the L20 sold out: the starts fail, and so do new instances), which the pass after the
    write sees: on the slower A10 the 3 missing L20s are 5 A10s, 7 in all. The Stopped instances (in ESS's
    TotalCapacity) used to count as held, 6 of the 5 wanted, and no more were ordered than the plan's 5."""
    with _ladder(tmp_path, 6, types=(L20, A10)) as w:
        w.cloud.ess.groups[w.gid].scaling_policy = "recycle"
        w.ess.scale_to(w.gid, 2, "scale-in")
        w.cloud.advance(600)
        observation = w.observe()
        assert observation.groups["chat"].group.stopped_capacity == 4
        w.cloud.set_stock(A10, 0)  # what the fake's group is made of: the ladder's L20
        w.ess.scale_to(w.gid, 5, "the plan's write")
        now = w.cloud.now()
        result = w.manager.fall_back(observation, {"chat": 5}, now, fence=lambda: True, written={"chat"})
        assert [(m.kind, m.target) for m in result.moves] == [(MoveKind.FALL_BACK, 7)]
        assert cs.load_memory(w.store, "chat").unfolded_extra == 2


class _Refusing:
    """The ESS adapter, with the scale-outs in ``refused`` listed before the fake's own activities."""

    def __init__(self, ess: Any) -> None:
        self._ess = ess
        self.refused: list[ScalingActivity] = []

    def describe_scaling_activities(self, group_id: str, status_code: str | None = None, limit: int = 20):
        return self.refused + self._ess.describe_scaling_activities(group_id, status_code, limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ess, name)


def _ended(w: Ladder, n: int, status: str, code: str | None) -> ScalingActivity:
    at = w.now + timedelta(minutes=n)
    message = f"error code: {code}, msg: refused" if code else None
    return ScalingActivity(f"asa-{n}", w.gid, status, "scale-out", at, at, 3, message, code)


def test_a_scale_out_refused_by_an_ess_quota_moves_no_rung_and_is_announced_once_per_run(tmp_path):
    """ESS's own limit on the instances of scaling groups (QuotaExceeded.ScalingInstance) read as a stock-out
    (it holds the "QuotaExceed" marker): the group walked its whole ladder, then paged "every rung sold out",
    though no type, zone or market changes an ESS quota."""
    with _ladder(tmp_path, 1) as w:
        ess = _Refusing(w.manager.ess)
        w.manager.ess = ess
        quota = "QuotaExceeded.ScalingInstance"
        for n, (status, code) in enumerate(
            [("Failed", quota), ("Failed", quota), ("Successful", None), ("Failed", quota)], start=1
        ):
            ess.refused.insert(0, _ended(w, n, status, code))
            result = w.manager.fall_back(w.observe(), {"chat": 3}, w.now, fence=lambda: True)
            assert result.moves == [] and cs.load_memory(w.store, "chat").rung == 0
        titles = [n.title for n in w.notes]
        assert titles == [f"chat: scale-out refused by an ESS quota ({quota})"] * 2  # once a run, two runs
        assert cs.records(w.store) == []  # no stock-out recorded


def _fell_back_to(rung_type: str) -> Callable[[CapacityManager, datetime], CapacityMemory]:
    """Memory of a group that fell back to ``rung_type`` (its second rung when it was saved)."""

    def memory(manager: CapacityManager, now: datetime) -> CapacityMemory:
        return CapacityMemory(rung=1, on=Rung(instance_type=rung_type), moved_at=now - timedelta(hours=1))

    return memory


def _configured_types(w: Ladder) -> list[str]:
    config = w.cloud.ess.configurations[w.cloud.ess.groups[w.gid].active_config_id]
    return list(config.instance_types)


def test_a_ladder_shortened_to_one_type_in_the_config_writes_that_type_back_first(tmp_path):
    """The group fell back to the L20; fleet.yaml now lists the A10 alone. A one-rung ladder was never looked
    at again, so the scaling configuration kept launching L20s (and the stored position pointed past the
    ladder's end)."""
    with _ladder(tmp_path, 2, types=(A10,), memory=_fell_back_to(L20)) as w:
        w.ess.modify_scaling_configuration(
            w.cloud.ess.groups[w.gid].active_config_id, instance_types=[L20, A10], spot_strategy="NoSpot"
        )
        result = w.manager.fall_back(w.observe(), {"chat": 2}, w.now, fence=lambda: True)
        assert [(m.kind, m.to_rung.instance_type) for m in result.moves] == [(MoveKind.RETRY, A10)]
        assert _configured_types(w)[0] == A10
        memory = cs.load_memory(w.store, "chat")
        assert (memory.rung, memory.on and memory.on.instance_type) == (0, A10)
        again = w.manager.fall_back(w.observe(), {"chat": 2}, w.now, fence=lambda: True)
        assert again.moves == []  # once per configuration


def test_a_reordered_ladder_keeps_the_group_on_the_type_it_fell_back_to(tmp_path):
    """The group fell back to the L20, its second rung; fleet.yaml now lists the L20 first. The stored index
    (1) now pointed at the A10, which the group was never on."""
    with _ladder(tmp_path, 2, types=(L20, A10), memory=_fell_back_to(L20)) as w:
        result = w.manager.fall_back(w.observe(), {"chat": 2}, w.now, fence=lambda: True)
        assert result.moves == []
        memory = cs.load_memory(w.store, "chat")
        assert (memory.rung, memory.on and memory.on.instance_type) == (0, L20)
