"""The service against hostile samples and failing groups (issue 14): one bad instance or one broken group
never stops the fleet.

Two groups live in the in-process fake: ``chat`` (a throttle rule, an XID rule and a queue rule) and
``other`` (a queue rule). Any instance can publish custom metrics, so every value a float can hold is tried.
"""

from __future__ import annotations

import logging
import math
import textwrap
from collections.abc import Iterator, Sequence
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.cloud.types import MetricPoint
from fleet.config import load_config
from fleet.service.app import build_service
from fleet.service.observe import Observer
from fleet.service.sanitize import problem
from fleet.service.snapshot import build_snapshot
from fleet.service.store import Outcome
from fleet.testing import mock_aliyun
from policies import decide
from policies import metrics as pm

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value"}
FAST = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)
CUSTOM = {
    pm.QUEUE_WAITING: "vllm_num_requests_waiting",
    pm.GPU_THROTTLE_REASONS: "gpu_throttle_reasons",
    pm.GPU_XID: "gpu_xid",
}
GOOD = {pm.QUEUE_WAITING: 1.0, pm.GPU_THROTTLE_REASONS: 0.0, pm.GPU_XID: 0.0}

BAD_VALUES = st.one_of(
    st.sampled_from(
        [math.nan, math.inf, -math.inf, 1e308, -1e308, -1.0, float(2**64), float(10**30), 3.5e15]
    ),
    st.floats(max_value=-1e-6),
    st.floats(min_value=1e13),
    st.integers(min_value=2**60, max_value=2**200).map(float),
)


def _config_text(chat_id: str, other_id: str) -> str:
    return textwrap.dedent(f"""\
        region: {REGION}
        account_id: "1234567890"
        groups:
          - name: chat
            scaling_group_id: {chat_id}
            min_size: 1
            max_size: 10
            scale_out:
              - {{metric: queue_waiting_per_instance, above: 2, for: 0s}}
            isolation:
              rules:
                - {{name: throttled, throttle_reasons: [hw_thermal], samples: 3}}
                - {{name: xid_hw, xids: [48, 79], action: replace}}
          - name: other
            scaling_group_id: {other_id}
            min_size: 1
            max_size: 10
            scale_out:
              - {{metric: queue_waiting_per_instance, above: 2, for: 0s}}
        """)


class World:
    def __init__(self, cloud, svc, ids: dict[str, str]) -> None:
        self.cloud = cloud
        self.svc = svc
        self.ids = ids


@pytest.fixture
def world(tmp_path) -> Iterator[World]:
    with mock_aliyun(boot_seconds=30) as cloud:
        ids = {
            name: cloud.create_group_for_tests(
                name=name, min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
            )
            for name in ("chat", "other")
        }
        path = tmp_path / "fleet.yaml"
        path.write_text(_config_text(ids["chat"], ids["other"]))
        cfg = load_config(path, env={})
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        svc = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        yield World(cloud, svc, ids)
        svc.close()


def _instances(w: World) -> dict[str, list[str]]:
    obs = w.svc.observer.observe(w.cloud.now())
    return {name: sorted(i.instance_id for i in g.instances) for name, g in obs.groups.items()}


def _publish_good(w: World, instances: dict[str, list[str]], skip: tuple[str, str] | None = None) -> None:
    for ids in instances.values():
        for iid in ids:
            for canonical, value in GOOD.items():
                if (iid, canonical) != skip:
                    w.cloud.put_custom_metric(CUSTOM[canonical], {"instanceId": iid}, value)


class _Without:
    """A metric source that hides one instance's points of one metric: the 'sample missing' reference."""

    def __init__(self, inner, instance_id: str, canonical: str) -> None:
        self.inner = inner
        self.hidden = (instance_id, canonical)

    def describe(self, canonical: str) -> str:
        return self.inner.describe(canonical)

    def take_warnings(self, canonical: str) -> list[str]:
        return self.inner.take_warnings(canonical)

    def read_last(self, canonical: str, instance_ids: Sequence[str]) -> list[MetricPoint]:
        points = self.inner.read_last(canonical, instance_ids)
        return [p for p in points if (p.instance_id, canonical) != self.hidden]


def _reference_plan(w: World, now: datetime, instance_id: str, canonical: str, group: str):
    """What the service would decide at ``now`` had ``instance_id`` not reported ``canonical`` at all."""
    svc = w.svc
    ref = Observer(svc.clients, svc.specs)
    ref.sources[group] = _Without(ref.sources[group], instance_id, canonical)
    obs = ref.observe(now)
    history = svc._load_history()
    snap, _ = build_snapshot(
        svc.store, svc.specs, now, obs, svc.store.paused_groups(), svc.store.pending_requests(), history
    )
    return decide(snap, svc.policy, history, now)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_nan_throttle_sample_does_not_stop_the_tick(world: World) -> None:
    """The issue's reproduction: nan for gpu_throttle_reasons on one instance of a throttle-rule group."""
    instances = _instances(world)
    _publish_good(world, instances)
    bad = instances["chat"][0]
    world.cloud.put_custom_metric("gpu_throttle_reasons", {"instanceId": bad}, math.nan)
    result = world.svc.tick(world.cloud.now())
    assert result.ok, result.errors
    assert {gp.group for gp in result.plan.groups} == {"chat", "other"}
    seen = world.svc.last_observation.groups["chat"].metrics
    assert pm.GPU_THROTTLE_REASONS not in seen.get(bad, {})
    assert seen[instances["chat"][1]][pm.GPU_THROTTLE_REASONS].value == 0.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=BAD_VALUES,
    group=st.sampled_from(["chat", "other"]),
    index=st.integers(0, 1),
    canonical=st.sampled_from([pm.QUEUE_WAITING, pm.GPU_THROTTLE_REASONS, pm.GPU_XID]),
)
def test_any_bad_value_is_decided_as_missing_and_logged_once(
    world: World, value: float, group: str, index: int, canonical: str
) -> None:
    if group == "other" and canonical != pm.QUEUE_WAITING:
        canonical = pm.QUEUE_WAITING  # "other" reads only its queue
    assert problem(canonical, value, world.cloud.now(), world.cloud.now()) is not None
    world.cloud.advance(20)
    instances = _instances(world)
    bad = instances[group][index]
    _publish_good(world, instances, skip=(bad, canonical))
    world.cloud.put_custom_metric(CUSTOM[canonical], {"instanceId": bad}, value)
    now = world.cloud.now()
    expected = _reference_plan(world, now, bad, canonical, group)
    world.svc.observer.guard = type(world.svc.observer.guard)()  # each example is a fresh bad instance
    lines = _Lines()
    logging.getLogger("fleet.service.observe").addHandler(lines)
    try:
        result = world.svc.tick(now)
        world.cloud.advance(5)
        world.cloud.put_custom_metric(CUSTOM[canonical], {"instanceId": bad}, value)
        again = world.svc.tick(world.cloud.now())
    finally:
        logging.getLogger("fleet.service.observe").removeHandler(lines)
    assert result.ok and again.ok, (result.errors, again.errors)
    got = {gp.group: gp.model_dump(mode="json") for gp in result.plan.groups}
    want = {gp.group: gp.model_dump(mode="json") for gp in expected.groups}
    assert got == want
    mentions = [line for line in lines.lines if bad in line and canonical in line]
    assert len(mentions) == 1, lines.lines  # once over both ticks, naming the metric


def test_an_exception_deciding_one_group_holds_it_and_the_other_still_scales(
    world: World, monkeypatch
) -> None:
    instances = _instances(world)
    for iid in instances["other"]:
        world.cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 9.0)
    import fleet.service.loop as loop

    real = loop.decide

    def exploding(snapshot, spec, history, now):
        if any(g.name == "chat" for g in snapshot.groups):
            raise RuntimeError("boom in chat")
        return real(snapshot, spec, history, now)

    monkeypatch.setattr(loop, "decide", exploding)
    result = world.svc.tick(world.cloud.now())
    assert any("chat" in e and "boom in chat" in e for e in result.errors)
    chat = result.plan.group("chat")
    assert chat is not None and chat.reason.value == "decision_failed" and chat.desired_capacity is None
    scaled = [a for a in result.actions if a.group == "other" and a.action == "scale_to"]
    assert scaled and scaled[0].outcome == Outcome.APPLIED and scaled[0].target == 9
    failed = world.svc.store.decisions(group="chat", kind="decide")
    assert [(d.outcome, "boom in chat" in (d.error or "")) for d in failed] == [(Outcome.FAILED, True)]


def test_an_exception_actuating_one_group_does_not_stop_the_others(world: World, monkeypatch) -> None:
    instances = _instances(world)
    for ids in instances.values():
        for iid in ids:
            world.cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 9.0)
    actuator = world.svc.actuator
    real = actuator.scale

    def exploding(gp, *args, **kwargs):
        if gp.group == "chat":
            raise ValueError("cannot actuate chat")
        return real(gp, *args, **kwargs)

    monkeypatch.setattr(actuator, "scale", exploding)
    result = world.svc.tick(world.cloud.now())
    assert any("cannot actuate chat" in e for e in result.errors)
    assert [a.group for a in result.actions if a.action == "scale_to"] == ["other"]
    failed = world.svc.store.decisions(group="chat", kind="actuate")
    assert len(failed) == 1 and failed[0].outcome == Outcome.FAILED


BOUNDS_YAML = """\
min_size: 1
max_size: 8
warm_floor: 1
scale_out:
  - {metric: queue_waiting_per_instance, above: 2, for: 0s}
"""


def test_a_max_size_above_the_ess_groups_is_written_within_it_once(fake_world) -> None:
    """Issue 14 item 4: max_size 8 on an ESS group of MaxSize 5 wrote 'applied 8', then failed every tick."""
    cloud, svc, gid = fake_world(BOUNDS_YAML, in_service=2, max_size=5)
    for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 9.0)
    first = svc.tick(cloud.now())
    assert first.ok, first.errors
    (scale,) = [a for a in first.actions if a.action == "scale_to"]
    assert (scale.outcome, scale.target) == (Outcome.APPLIED, 5)
    assert "MaxSize 5" in scale.reason
    for _ in range(3):
        cloud.advance(15)
        for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 9.0)
        result = svc.tick(cloud.now())
        assert result.ok, result.errors
    rows = svc.store.decisions(group="chat", kind="scale")
    assert [(d.outcome, d.target) for d in rows] == [(Outcome.APPLIED, 5)]


def _clip_reason(gp):
    return [r for r in gp.reasons if r.code == "clipped_to_ess_bounds"]


def test_the_plan_recorded_and_shown_carries_the_target_clipped_to_ess_max_size(fake_world) -> None:
    """The plan itself (status, capacity, audit) says 5, not fleet.yaml's 8, and names the clip."""
    from fleet.service.views import service_status

    cloud, svc, gid = fake_world(BOUNDS_YAML, in_service=2, max_size=5)
    for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 9.0)
    first = svc.tick(cloud.now())
    assert first.ok, first.errors
    assert first.plan is not None
    gp = first.plan.group("chat")
    assert gp is not None
    (clip,) = _clip_reason(gp)
    assert (gp.target_capacity, gp.desired_capacity, gp.direction) == (5, 5, "up")
    assert gp.serving_target == 5 and clip.inputs["planned_target"] > 5 and clip.inputs["ess_max_size"] == 5
    assert "MaxSize 5" in clip.detail
    (row,) = svc.store.decisions(group="chat", kind="scale")
    assert row.target == 5 and "MaxSize 5" in row.reason
    assert row.inputs["planned_target"] == clip.inputs["planned_target"]
    assert any(r["code"] == "clipped_to_ess_bounds" for r in row.inputs["reasons"])
    view = service_status(svc.store, cloud.now(), ["chat"], {}, svc.last_observation, first.plan)
    assert view["groups"][0]["target"] == 5
    # once ESS has 5, the plan still shows 5 and asks for no write
    cloud.advance(15)
    for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 9.0)
    again = svc.tick(cloud.now())
    assert again.plan is not None
    gp = again.plan.group("chat")
    assert gp is not None and _clip_reason(gp)
    assert (gp.target_capacity, gp.desired_capacity, gp.direction) == (5, None, "none")


def test_a_target_under_the_ess_min_size_is_raised_to_it_in_the_plan(fake_world) -> None:
    cloud, svc, gid = fake_world(QUIET_YAML, in_service=2)
    cloud.ess.groups[gid].min_size = 3  # the ESS group allows 3..20, fleet.yaml 1..4
    result = svc.tick(cloud.now())
    assert result.ok, result.errors
    assert result.plan is not None
    gp = result.plan.group("chat")
    assert gp is not None
    (clip,) = _clip_reason(gp)
    assert (gp.target_capacity, gp.desired_capacity, gp.direction) == (3, 3, "up")
    assert "MinSize 3" in clip.detail and clip.inputs["planned_target"] == 2  # it holds the 2 it has
    (row,) = svc.store.decisions(group="chat", kind="scale")
    assert (row.target, row.outcome) == (3, Outcome.APPLIED) and "MinSize 3" in row.reason


def test_a_plan_within_the_ess_bounds_is_left_as_it_is() -> None:
    from fleet.cloud.types import ScalingGroup
    from fleet.service.actuate import clip_to_ess
    from policies.model import GroupPlan

    group = ScalingGroup("asg-1", "chat", "Active", 1, 5, 3, 3, 3, 0, 0, 0, 0, 0, None, 300)
    gp = GroupPlan(group="chat", serving_target=4, target_capacity=4, desired_capacity=4, direction="up")
    assert clip_to_ess(gp, group) is gp
    assert clip_to_ess(gp, None) is gp
    over = gp.model_copy(update={"serving_target": 7, "target_capacity": 7, "desired_capacity": 7})
    clipped = clip_to_ess(over, group)
    assert (clipped.target_capacity, clipped.serving_target, clipped.desired_capacity) == (5, 5, 5)
    assert clip_to_ess(clipped, group) is clipped  # clipping twice changes nothing more
    paused = over.model_copy(update={"reason": "paused", "desired_capacity": None})
    assert clip_to_ess(paused, group).desired_capacity is None  # paused: shown clipped, never written


def test_a_max_size_beyond_what_ess_allows_is_refused() -> None:
    from pydantic import ValidationError

    from policies import GroupSpec

    with pytest.raises(ValidationError, match="max_size"):
        GroupSpec.model_validate({"name": "g", "min_size": 1, "max_size": 10**32})


QUIET_YAML = "min_size: 1\nmax_size: 4\nwarm_floor: 1\n"


def test_a_deleted_sqlite_file_stops_the_service_loudly(fake_world, tmp_path) -> None:
    """Issue 14 item 11: the service went on writing into the unlinked file."""
    cloud, svc, _ = fake_world(QUIET_YAML)
    assert svc.tick(cloud.now()).ok
    (tmp_path / "fleet.db").unlink()
    result = svc.tick(cloud.now())
    assert result.fatal and "was deleted" in result.fatal and not result.ok
    assert not result.leader and result.plan is None  # nothing decided, nothing written


def test_a_replaced_sqlite_file_stops_the_service_loudly(fake_world, tmp_path) -> None:
    from fleet.service.store import open_store

    cloud, svc, _ = fake_world(QUIET_YAML)
    assert svc.tick(cloud.now()).ok
    db = tmp_path / "fleet.db"
    db.rename(tmp_path / "old.db")
    open_store(f"sqlite:///{db}").close()  # e.g. `fleet isolate` created a fresh one
    result = svc.tick(cloud.now())
    assert result.fatal and "replaced" in result.fatal


def test_run_forever_stops_on_a_fatal_tick_and_returns_why(fake_world, tmp_path) -> None:
    import threading

    from fleet.service.app import run_forever

    cloud, svc, _ = fake_world(QUIET_YAML)
    svc.clock = cloud.now
    (tmp_path / "fleet.db").unlink()
    done: dict[str, str | None] = {}
    thread = threading.Thread(
        target=lambda: done.setdefault("why", run_forever(svc, 0.2, install_signals=False)), daemon=True
    )
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and "was deleted" in (done["why"] or "")


def test_an_operator_request_to_a_missing_sqlite_file_is_refused(tmp_path, capsys) -> None:
    from fleet.cli import main

    db = tmp_path / "gone.db"
    assert main(["isolate", "i-abc", "--reason", "fan", "--database", f"sqlite:///{db}"]) == 2
    assert "does not exist" in capsys.readouterr().err and not db.exists()


class _Killed(BaseException):
    """A kill -9 stand-in: no ``except Exception`` of the service catches it, nothing after it runs."""


SCALE_YAML = BOUNDS_YAML  # max_size 8, a queue rule that fires at once


def _busy(cloud, svc, value: float = 9.0) -> None:
    for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, value)


def _kill_around_scale_to(monkeypatch, svc, *, after_write: bool) -> None:
    ess = svc.clients.ess
    real = ess.scale_to

    def dying(group_id, total, token):
        if after_write:
            real(group_id, total, token)
        raise _Killed()

    monkeypatch.setattr(ess, "scale_to", dying)


def test_a_kill_between_the_write_and_its_audit_is_reconciled_on_restart(fake_world, monkeypatch) -> None:
    """Issue 14 item 9: the applied scale was missing from `fleet decisions` after a kill -9."""
    cloud, svc, gid = fake_world(SCALE_YAML, in_service=2, max_size=10, holder_id="replica-1")
    _busy(cloud, svc)
    _kill_around_scale_to(monkeypatch, svc, after_write=True)
    with pytest.raises(_Killed):
        svc.tick(cloud.now())
    (intent,) = svc.store.decisions(kind="scale")
    assert intent.outcome == Outcome.INTENDED and intent.client_token and intent.target == 8

    cloud.advance(svc.settings.lease_ttl_s + 1)  # the killed replica's lease runs out first
    _, again, _ = fake_world(SCALE_YAML, holder_id="replica-1")  # the restarted replica, same store
    _busy(cloud, again)
    result = again.tick(cloud.now())
    assert result.ok, result.errors
    rows = again.store.decisions(kind="scale")
    assert [(d.outcome, d.target, d.client_token) for d in rows] == [
        (Outcome.APPLIED, 8, intent.client_token)
    ]
    assert rows[0].request_id and rows[0].request_id.startswith("asa-")
    scale_ups = [a for a in again.clients.ess.describe_scaling_activities(gid) if 'to "8"' in (a.cause or "")]
    assert [a.activity_id for a in scale_ups] == [rows[0].request_id]  # written once, found, not repeated


def test_a_kill_before_the_write_reached_ess_is_retried_with_the_same_token(fake_world, monkeypatch) -> None:
    cloud, svc, gid = fake_world(SCALE_YAML, in_service=2, max_size=10, holder_id="replica-1")
    _busy(cloud, svc)
    _kill_around_scale_to(monkeypatch, svc, after_write=False)
    with pytest.raises(_Killed):
        svc.tick(cloud.now())
    (intent,) = svc.store.decisions(kind="scale")

    cloud.advance(svc.settings.lease_ttl_s + 1)
    _, again, _ = fake_world(SCALE_YAML, holder_id="replica-1")
    _busy(cloud, again)
    result = again.tick(cloud.now())
    assert result.ok, result.errors
    rows = sorted(again.store.decisions(kind="scale"), key=lambda d: d.id)
    assert [(d.outcome, d.client_token) for d in rows] == [
        (Outcome.ERROR, intent.client_token),  # the interrupted attempt: never reached ESS
        (Outcome.APPLIED, intent.client_token),  # this tick's write, the same decision and token
    ]
    assert "interrupted" in (rows[0].error or "")


def _kill_around_enter_standby(monkeypatch, svc, *, after_write: bool) -> None:
    ess = svc.clients.ess
    real = ess.enter_standby

    def dying(group_id, instance_ids, token):
        if after_write:
            real(group_id, instance_ids, token)
        raise _Killed()

    monkeypatch.setattr(ess, "enter_standby", dying)


def _tick_hot_until_killed(cloud, svc, hot: str) -> None:
    """Tick with ``hot`` overheating until the service dies in its EnterStandby."""
    from tests.fleet.service.test_isolation import _ids, _publish

    for _ in range(40):
        _publish(cloud, _ids(svc, cloud), {hot})
        try:
            svc.tick(cloud.now())
        except _Killed:
            return
        cloud.advance(15)
    raise AssertionError("the isolation never reached EnterStandby")


def _enter_standby_rows(svc):
    return sorted(
        (d for d in svc.store.decisions(kind="isolation") if d.action == "enter_standby"), key=lambda d: d.id
    )


def test_a_kill_between_enter_standby_and_its_audit_is_reconciled_on_restart(fake_world, monkeypatch) -> None:
    """Isolation steps are recorded intent first like scale writes; the next leader settles them."""
    from tests.fleet.service.test_isolation import HOT_RULE, _ids, _run

    cloud, svc, _ = fake_world(HOT_RULE, holder_id="replica-1")
    hot = _ids(svc, cloud)[0]
    _kill_around_enter_standby(monkeypatch, svc, after_write=True)
    _tick_hot_until_killed(cloud, svc, hot)
    (intent,) = _enter_standby_rows(svc)
    assert (intent.outcome, intent.instance_id) == (Outcome.INTENDED, hot) and intent.client_token

    cloud.advance(svc.settings.lease_ttl_s + 1)  # the killed replica's lease runs out first
    _, again, _ = fake_world(HOT_RULE, holder_id="replica-1")  # the restarted replica, same store
    _run(cloud, again, {hot}, ticks=1)
    rows = _enter_standby_rows(again)
    assert rows[0].id == intent.id and rows[0].outcome == Outcome.APPLIED
    assert "already Standby" in rows[0].reason and "reconciled after an interruption" in rows[0].reason
    assert not [d for d in again.store.decisions() if d.outcome == Outcome.INTENDED]
    assert sum(1 for _, action in cloud.calls if action == "EnterStandby") == 1  # never sent again


def test_a_kill_before_enter_standby_reached_ess_is_retried_with_the_same_token(
    fake_world, monkeypatch
) -> None:
    from tests.fleet.service.test_isolation import HOT_RULE, _ids, _run

    cloud, svc, _ = fake_world(HOT_RULE, holder_id="replica-1")
    hot = _ids(svc, cloud)[0]
    _kill_around_enter_standby(monkeypatch, svc, after_write=False)
    _tick_hot_until_killed(cloud, svc, hot)
    (intent,) = _enter_standby_rows(svc)
    assert intent.outcome == Outcome.INTENDED

    cloud.advance(svc.settings.lease_ttl_s + 1)
    _, again, _ = fake_world(HOT_RULE, holder_id="replica-1")
    _run(cloud, again, {hot}, ticks=1)
    rows = _enter_standby_rows(again)
    assert [(d.outcome, d.client_token) for d in rows] == [
        (Outcome.ERROR, intent.client_token),  # the interrupted attempt: the instance was not in Standby
        (Outcome.APPLIED, intent.client_token),  # this tick's step, the same step and token
    ]
    assert "interrupted" in (rows[0].error or "")
    assert sum(1 for _, action in cloud.calls if action == "EnterStandby") == 1
