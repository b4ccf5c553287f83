"""The tick loop against the in-process fake cloud: observe -> decide -> actuate -> record."""

from __future__ import annotations

import textwrap
from contextlib import contextmanager
from datetime import timedelta

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service.app import build_service
from fleet.testing import mock_aliyun

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value"}
FAST = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)


def _config(tmp_path, group_id, extra=""):
    text = textwrap.dedent(f"""
        region: {REGION}
        account_id: "1234567890"
        tick_interval_s: 15
        groups:
          - name: chat
            scaling_group_id: {group_id}
            min_size: 1
            max_size: 10
            warm_floor: 2
            cold_start_s: 60
            scale_out:
              - {{metric: queue_waiting_per_instance, above: 2, for: 30s}}
            scale_in:
              - {{metric: queue_waiting_per_instance, below: 0.5, for: 2m}}
            stabilization: {{scale_in_window: 2m}}
    """) + textwrap.dedent(extra)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return load_config(path, env={})


@pytest.fixture
def world(tmp_path):
    """(cloud, service, group_id): a group of 2 InService instances and a service over a SQLite file."""
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        cfg = _config(tmp_path, gid)
        svc = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        yield cloud, svc, gid
        svc.close()


def _publish_queue(cloud, svc, waiting):
    obs = svc.observer.observe(cloud.now())
    for inst in obs.groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, waiting)


def _desired(svc):
    return svc.observer.observe(svc.clock()).groups["chat"].group.desired_capacity


def test_first_tick_takes_the_lease_and_records_history(world):
    cloud, svc, _ = world
    result = svc.tick(cloud.now())
    assert result.leader and result.lease_epoch == 1
    assert svc.store.load_history() is not None


def test_queue_above_rule_scales_out_once_duration_passes(world):
    cloud, svc, _ = world
    _publish_queue(cloud, svc, 3)
    svc.tick(cloud.now())
    assert _desired(svc) == 2  # the rule has not held for 30 s yet
    for _ in range(3):
        cloud.advance(15)
        _publish_queue(cloud, svc, 3)
        svc.tick(cloud.now())
    assert _desired(svc) > 2
    [d] = [d for d in svc.store.decisions(kind="scale") if d.outcome == "applied"]
    assert d.client_token and d.request_id


def test_missing_metrics_never_scale_in(world):
    cloud, svc, _ = world
    # no metrics are ever published
    for _ in range(20):
        svc.tick(cloud.now())
        cloud.advance(15)
    assert _desired(svc) == 2
    assert not [d for d in svc.store.decisions(kind="scale") if d.target is not None and d.target < 2]


def test_repeated_tick_after_scale_writes_nothing_more(world):
    cloud, svc, _ = world
    for _ in range(4):
        _publish_queue(cloud, svc, 3)
        svc.tick(cloud.now())
        cloud.advance(15)
    applied = [d for d in svc.store.decisions(kind="scale") if d.outcome == "applied"]
    assert len(applied) == 1


def test_dry_run_records_and_touches_nothing(tmp_path):
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        svc = build_service(
            _config(tmp_path, gid), clients, database_url="sqlite://", clock=cloud.now, dry_run=True
        )
        for _ in range(4):
            _publish_queue(cloud, svc, 3)
            svc.tick(cloud.now())
            cloud.advance(15)
        assert _desired(svc) == 2
        dry = [d for d in svc.store.decisions(kind="scale") if d.outcome == "dry_run"]
        assert dry and dry[0].target > 2
        svc.close()


def test_a_second_replica_stands_by_while_the_first_holds_the_lease(world, tmp_path):
    cloud, svc, _ = world
    other = build_service(
        _config(tmp_path, world[2]),
        svc.clients,
        database_url=f"sqlite:///{tmp_path / 'fleet.db'}",
        clock=cloud.now,
    )
    try:
        assert svc.tick(cloud.now()).leader
        assert not other.tick(cloud.now()).leader
        cloud.advance(timedelta(seconds=svc.settings.lease_ttl_s + 1).total_seconds())
        assert other.tick(cloud.now()).leader
        assert not svc.tick(cloud.now()).leader
    finally:
        other.close(release_lease=False)


def test_a_replica_on_a_clock_behind_the_wall_hands_its_lease_over_when_it_closes(world, tmp_path):
    # a service replaying an earlier day (a simulation, a virtual clock) writes its lease in its own time:
    # the release at shutdown too, or the lease would run until the wall clock's now in the replayed time
    cloud, _, gid = world

    def replayed():
        return cloud.now() - timedelta(days=3)

    def replica():
        url = f"sqlite:///{tmp_path / 'replayed.db'}"
        return build_service(
            _config(tmp_path, gid),
            make_clients(REGION, cloud.account_id, retry=FAST, env=ENV),
            database_url=url,
            clock=replayed,
        )

    first, second = replica(), replica()
    try:
        assert first.tick(replayed()).leader
        first.close()
        assert second.tick(replayed()).leader
    finally:
        second.close(release_lease=False)


def test_settings_come_from_the_config_with_a_lease_longer_than_two_ticks(tmp_path):
    from fleet.service.settings import ServiceSettings

    cfg = _config(tmp_path, "asg-1", extra="api: {port: 9999, token: abc-token}\nlease: {ttl_s: 20}\n")
    s = ServiceSettings.from_config(cfg, env={})
    assert (s.api_port, s.api_token, s.tick_interval_s) == (9999, "abc-token", 15.0)
    assert s.lease_ttl_s == 31.0  # 20 s would lapse between two 15 s ticks
    assert "abc-token" not in repr(s)


def test_api_token_falls_back_to_the_environment(tmp_path):
    from fleet.service.settings import ServiceSettings

    s = ServiceSettings.from_config(_config(tmp_path, "asg-1"), env={"FLEET_API_TOKEN": "from-env"})
    assert s.api_token == "from-env"


def test_metric_reads_per_tick_grow_with_metrics_not_instances(fake_world):
    cloud, svc, _ = fake_world(
        """\
        min_size: 1
        max_size: 60
        warm_floor: 1
        scale_out:
          - {metric: queue_waiting_per_instance, above: 2, for: 30s}
        isolation:
          rules:
            - {metric: gpu_temperature_c, above: 85, for: 2m}
        """,
        in_service=40,
        max_size=60,
    )
    cloud.calls.clear()
    obs = svc.observer.observe(cloud.now())
    calls = [a for _, a in cloud.calls]
    # queue_waiting, requests_running (draining) and gpu_temperature_c: one batched read each for 40 instances
    assert calls.count("DescribeMetricLast") == 3
    assert calls.count("DescribeInstancesFullStatus") == 1
    assert calls.count("DescribeInstanceHistoryEvents") == 0  # one call per instance: never per tick
    assert len(obs.groups["chat"].instances) == 40


def test_a_scale_out_on_postgresql(fake_world, postgres_url):
    cloud, svc, _ = fake_world(
        """\
        min_size: 1
        max_size: 10
        warm_floor: 1
        scale_out:
          - {metric: queue_waiting_per_instance, above: 2, for: 30s}
        """,
        in_service=2,
        database_url=postgres_url,
    )
    for _ in range(4):
        _publish_queue(cloud, svc, 3)
        svc.tick(cloud.now())
        cloud.advance(15)
    assert _desired(svc) > 2
    assert [d.outcome for d in svc.store.decisions(kind="scale")] == ["applied"]
    assert svc.store.load_history()["groups"]["chat"]["last_target"] > 2


def test_a_group_that_does_not_exist_is_reported_and_left_alone(fake_world):
    cloud, svc, _ = fake_world("min_size: 1\nmax_size: 4\n", scaling_group_id="asg-does-not-exist")
    result = svc.tick(cloud.now())
    assert any("chat" in e and "not found" in e for e in result.errors)
    assert not result.actions


def test_a_group_name_that_does_not_exist_is_named_in_the_error(tmp_path):
    with mock_aliyun(boot_seconds=30) as cloud:
        cloud.create_group_for_tests(name="chat", min_size=1, max_size=10, in_service=1, region_id=REGION)
        path = tmp_path / "fleet.yaml"
        path.write_text(
            f"region: {REGION}\naccount_id: '1234567890'\ngroups:\n"
            "  - {name: chat, scaling_group_name: chat-typo, min_size: 1, max_size: 10}\n"
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        svc = build_service(load_config(path, env={}), clients, database_url="sqlite://", clock=cloud.now)
        try:
            result = svc.tick(cloud.now())
        finally:
            svc.close()
    assert "group chat: scaling group 'chat-typo' not found" in result.errors


def test_a_dry_run_replica_never_takes_the_real_lease_or_history(fake_world):
    cloud, real, _ = fake_world("min_size: 1\nmax_size: 4\nwarm_floor: 1\n")
    _, shadow, _ = fake_world("min_size: 1\nmax_size: 4\nwarm_floor: 1\n", dry_run=True)
    assert shadow.tick(cloud.now()).leader
    assert real.tick(cloud.now()).leader
    assert shadow.store.service == "fleet-dry-run" and real.store.service == "fleet"


# (a column-0 comment keeps the group key's indentation through _config's dedent)
PREDICTIVE_EXTRA = "# predictive\n    predictive: {{mode: {mode}, capacity_rps: 1.0, horizon: 2m}}\n"


@contextmanager
def _predictive_world(tmp_path, mode, in_service):
    """(cloud, service) over a group of ``in_service`` instances whose predictive mode is ``mode``, with a
    capacity of 1 req/s per instance."""
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat",
            min_size=1,
            max_size=10,
            desired_capacity=in_service,
            in_service=in_service,
            region_id=REGION,
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        extra = PREDICTIVE_EXTRA.format(mode=mode)
        cfg = _config(tmp_path, gid, extra=extra)
        svc = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        try:
            yield cloud, svc
        finally:
            svc.close()


def test_predictive_group_records_its_demand_and_exports_the_forecast_on_metrics(tmp_path):
    from prometheus_client import generate_latest

    from fleet.service.demand import DemandLog

    with _predictive_world(tmp_path, "forecast-only", in_service=2) as (cloud, svc):
        for _ in range(16):  # 16 ticks, 15 s apart: 4 minutes of a steady 3 req/s
            obs = svc.observer.observe(cloud.now())
            for inst in obs.groups["chat"].instances:
                cloud.put_custom_metric("vllm_request_rate", {"instanceId": inst.instance_id}, 1.5)
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 0)
            assert svc.tick(cloud.now()).ok
            cloud.advance(15)
        rows = DemandLog(svc.store, {"chat": 86400}).rows("chat", cloud.now() - timedelta(hours=1))
        assert len(rows) >= 3 and all(r.rps == 3.0 for r in rows)
        text = generate_latest(svc.metrics.registry).decode()
        assert 'fleet_predictive{field="demand_rps",group="chat"} 3.0' in text
        assert "fleet_forecast_mape_pct" in text and "fleet_forecast_upper_coverage" in text
        assert _desired(svc) == 2  # forecast-only: nothing written


def test_predictive_gauges_that_become_unknown_leave_metrics_rather_than_freeze(tmp_path):
    from prometheus_client import generate_latest

    with _predictive_world(tmp_path, "forecast-only", in_service=2) as (cloud, svc):
        ids = [i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances]
        for _ in range(24):  # 3 req/s for 6 minutes (the forecast's level needs 5), then every agent stops
            for iid in ids:
                cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, 1.5)
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 1.0)
            assert svc.tick(cloud.now()).ok
            cloud.advance(15)
        text = generate_latest(svc.metrics.registry).decode()
        assert 'fleet_predictive{field="demand_rps",group="chat"} 3.0' in text
        assert 'field="predictive_target",group="chat"' in text
        for _ in range(60):  # 15 minutes without a rate: the demand, the forecast and the target unknown
            svc.tick(cloud.now())
            cloud.advance(15)
        text = generate_latest(svc.metrics.registry).decode()
        for field in ("demand_rps", "forecast_rps", "predictive_target"):
            assert f'field="{field}",group="chat"' not in text, field
        assert 'field="capacity_per_instance_rps",group="chat"} 1.0' in text  # still known


def test_a_replica_taking_the_lease_back_reads_the_demand_the_other_leader_recorded(tmp_path):
    from fleet.service.demand import minute_of

    with _predictive_world(tmp_path, "forecast-only", in_service=2) as (cloud, a):
        cfg = _config(
            tmp_path, a.specs[0].scaling_group_id, extra=PREDICTIVE_EXTRA.format(mode="forecast-only")
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        b = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        try:
            ids = [i.instance_id for i in a.observer.observe(cloud.now()).groups["chat"].instances]

            def run(svc, minutes: int, rps: float) -> None:
                for _ in range(minutes * 4):
                    for iid in ids:
                        cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, rps / len(ids))
                        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 1.0)
                    svc.tick(cloud.now())
                    cloud.advance(15)

            run(a, 5, 2.0)  # a leads
            cloud.advance(a.settings.lease_ttl_s)  # a stalls past its lease; b takes over
            handover = minute_of(cloud.now())
            run(b, 10, 6.0)
            assert b.last_tick is not None and b.last_tick.leader
            b.close()
            cloud.advance(b.settings.lease_ttl_s)  # b goes; a takes its lease back
            run(a, 2, 6.0)
            assert a.last_tick is not None and a.last_tick.leader
            series = a.demand.series("chat", cloud.now())
            assert series is not None
            led_by_b = [
                v
                for k, v in enumerate(series.rps)
                if handover < series.start + timedelta(minutes=k) < handover + timedelta(minutes=9)
            ]
            assert led_by_b and all(v == 6.0 for v in led_by_b), series.rps  # a hole in a's memory before
        finally:
            b.close()


def test_one_agents_impossible_prompt_length_does_not_take_the_capacity_model_away(tmp_path, caplog):
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=4, in_service=4, region_id=REGION
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        pred = "{mode: forecast-only, model: Qwen2.5-14B, instance_type: ecs.gn7i-2x.8xlarge, "
        pred += "max_model_len: 8192}"
        cfg = _config(tmp_path, gid, extra=f"# predictive\n    predictive: {pred}\n")
        svc = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        try:
            ids = sorted(i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances)
            for _ in range(8):
                for iid in ids:
                    # one agent says its requests average 50,000 prompt tokens: no request of 8,192 can
                    prompt = 50_000.0 if iid == ids[0] else 1000.0
                    cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, 0.25)
                    cloud.put_custom_metric("vllm_prompt_tokens_per_request", {"instanceId": iid}, prompt)
                    cloud.put_custom_metric("vllm_output_tokens_per_request", {"instanceId": iid}, 200.0)
                    cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 1.0)
                assert svc.tick(cloud.now()).ok
                cloud.advance(15)
            inputs = svc.last_tick.plan.groups[0].predictive
            # weighted in, the mix read 12,750-token prompts: the capacity model a seventh of its 1.4 req/s
            assert (
                inputs["capacity_per_instance_rps"] is not None and inputs["capacity_per_instance_rps"] > 0.5
            )
        finally:
            svc.close()
    said = [r.getMessage() for r in caplog.records if "longer than the 8192 tokens" in r.getMessage()]
    assert len(said) == 1 and ids[0] in said[0]


def test_one_agents_absurd_request_rate_neither_buys_max_size_nor_enters_the_demand_history(tmp_path):
    from fleet.service.demand import DemandLog

    with _predictive_world(tmp_path, "on", in_service=3) as (cloud, svc):
        ids = sorted(i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances)
        # 10 minutes of a steady 1 req/s (the level needs 5); one agent says 5e5 req/s on one tick
        for tick in range(40):
            for iid in ids:
                rate = 5e5 if (tick, iid) == (36, ids[0]) else 1 / 3
                cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, rate)
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
            assert svc.tick(cloud.now()).ok
            cloud.advance(15)
        rows = DemandLog(svc.store, {"chat": 86400}).rows("chat", cloud.now() - timedelta(hours=1))
        assert _desired(svc) < 10  # the 5e5 req/s, summed in, set the target to max_size
        assert rows and max(r.rps for r in rows) <= 1.0 + 1e-9


def _steady_then(cloud, svc, spike, ticks=40, at=(36,)):
    """1 req/s over the group's instances for ``ticks`` ticks (10 minutes: the level needs 5), but the first
    instance's agent says ``spike`` req/s on the ticks ``at``; the group's demand minutes after."""
    from fleet.service.demand import DemandLog

    ids = sorted(i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances)
    for tick in range(ticks):
        for iid in ids:
            rate = spike if (tick in at and iid == ids[0]) else 1 / len(ids)
            cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, rate)
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 0)
        assert svc.tick(cloud.now()).ok
        cloud.advance(15)
    return DemandLog(svc.store, {"chat": 86400}).rows("chat", cloud.now() - timedelta(hours=1))


def test_agents_going_quiet_do_not_take_their_instances_demand_out_of_the_history(tmp_path):
    from fleet.service.demand import DemandLog

    with _predictive_world(tmp_path, "forecast-only", in_service=4) as (cloud, svc):
        ids = sorted(i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances)
        start = cloud.now()
        for tick in range(40):  # 10 minutes of 1 req/s an instance; one agent falls silent after 2
            for iid in ids if tick < 8 else ids[1:]:
                cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, 1.0)
                # (a queue between the rules' thresholds: no scale-in, no scale-out)
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 1.0)
            assert svc.tick(cloud.now()).ok
            cloud.advance(15)
        rows = DemandLog(svc.store, {"chat": 86400}).rows("chat", start - timedelta(minutes=1))
        assert _desired(svc) == 4
        # the balancer still sends the silent one its share: the group's demand is still 4 req/s
        assert len(rows) >= 8 and all(r.rps == 4.0 for r in rows), [r.rps for r in rows]


def test_one_reading_far_above_what_the_fleet_serves_waits_for_the_next_to_confirm_it(tmp_path, caplog):
    # 5,000 req/s passes the boundary's bound (10,000 per instance) but is over 10x the 3 instances' 3 req/s:
    # held, then dropped when the next agent period reads 1 req/s again
    with _predictive_world(tmp_path, "on", in_service=3) as (cloud, svc):
        rows = _steady_then(cloud, svc, 5e3)
        assert _desired(svc) < 10  # summed in at once, it set the target to max_size
        assert rows and max(r.rps for r in rows) <= 1.0 + 1e-9
    said = [r.getMessage() for r in caplog.records if r.name == "fleet.service.demand"]
    assert any("waiting for the next reading" in m for m in said) and any("left out" in m for m in said)


def test_a_surge_read_twice_running_counts_from_its_first_reading(tmp_path):
    # the guard's other side: a real surge (60 req/s for two agent periods, 20x the fleet) is held one
    # tick, then counted: the target goes to max_size as it did without the guard
    with _predictive_world(tmp_path, "on", in_service=3) as (cloud, svc):
        _steady_then(cloud, svc, 60.0, at=(30, 31), ticks=33)
        assert _desired(svc) == 10


def test_the_leader_prunes_demand_and_forecasts_past_their_retention_once_an_interval(tmp_path):
    from fleet.service.demand import DemandLog, DemandReading, minute_of

    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        extra = "# predictive\n    predictive: {mode: forecast-only, capacity_rps: 1.0, history: 1d}\n"
        cfg = _config(tmp_path, gid, extra=extra)
        svc = build_service(cfg, clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now)
        try:
            now = minute_of(cloud.now())
            log = DemandLog(svc.store, {})
            ages = [timedelta(days=3), timedelta(days=2, minutes=1), timedelta(days=2) - timedelta(minutes=1)]
            ages.append(timedelta(hours=1))
            for group in ("chat", "gone"):  # "gone" is no longer configured (renamed or removed)
                log.write(group, [DemandReading(now - age, 1.0) for age in ages])
            # past the default history's retention (7 days and a day), the longest of any group here
            log.write("gone", [DemandReading(now - timedelta(days=9), 1.0)])

            def minutes(group):
                return sorted(now - r.at for r in log.rows(group, now - timedelta(days=30)))

            assert svc.tick(cloud.now()).ok
            # retention: the group's history (1 day) and a day; the rows within it stay
            assert minutes("chat") == sorted(ages[2:])
            # an unconfigured group's rows are kept for the longest retention, then pruned: not for good
            assert minutes("gone") == sorted(ages)
            log.write("chat", [DemandReading(now - timedelta(days=5), 1.0)])
            cloud.advance(15)
            assert svc.tick(cloud.now()).ok  # within the prune interval: nothing pruned
            assert timedelta(days=5) in minutes("chat")
            cloud.advance(svc.settings.prune_interval_s)
            assert svc.tick(cloud.now()).ok
            # an hour on, the minute that was just inside the retention is past it too
            assert minutes("chat") == [timedelta(hours=1)]
        finally:
            svc.close()
