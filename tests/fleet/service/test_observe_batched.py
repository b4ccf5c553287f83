"""Observation that grows with metrics, not groups: one metric read across groups, cached instances,
region-wide reads for large fleets, and the bounded pools that run what remains."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.errors import CloudError
from fleet.cloud.retry import RetryPolicy, count_calls
from fleet.cloud.types import MetricPoint
from fleet.config import load_config
from fleet.service.observe import FailureLog, Observer, combine, needed_metrics
from fleet.service.pool import CallPools, TokenBucket
from fleet.service.settings import ServiceSettings
from fleet.testing import mock_aliyun
from policies import metrics as pm

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
FAST = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)


def _world(tmp_path, cloud, groups: int, instances: int, isolation: bool = False):
    lines = [f"region: {REGION}", f'account_id: "{cloud.account_id}"', "groups:"]
    for n in range(groups):
        gid = cloud.create_group_for_tests(
            name=f"g{n}",
            min_size=1,
            max_size=instances + 5,
            desired_capacity=instances,
            in_service=instances,
            region_id=REGION,
        )
        lines += [
            f"  - name: g{n}",
            f"    scaling_group_id: {gid}",
            "    min_size: 1",
            f"    max_size: {instances + 5}",
            "    scale_out:",
            "      - {metric: queue_waiting_per_instance, above: 2, for: 30s}",
        ]
        if isolation:
            rule = "        - {metric: gpu_temperature_c, above: 85, for: 2m}"
            lines += ["    isolation:", "      rules:", rule]
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_config(path, env={})


def _calls(cloud, action: str) -> int:
    return sum(1 for _, a in cloud.calls if a == action)


def test_one_metric_read_covers_every_group_and_is_split_by_group(tmp_path):
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=4, instances=3)
        for group in cloud.ess.groups.values():
            for iid in group.instance_ids:
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 7.0)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        cloud.calls.clear()
        obs = observer.observe(cloud.now())
        # one call per metric the rules need, whatever the number of groups (per group: four times as many)
        assert _calls(cloud, "DescribeMetricLast") == len(needed_metrics(cfg.groups[0]))
        assert _calls(cloud, "DescribeScalingGroups") == 1
        for name, g in obs.groups.items():
            own = {i.instance_id for i in g.instances}
            assert len(own) == 3
            assert set(g.metrics) == own, name  # each group holds its own instances' samples only
            assert all(m["queue_waiting"].value == 7.0 for m in g.metrics.values())
        assert obs.api_calls == len(cloud.calls)
        assert obs.calls_by_action["DescribeMetricLast"] == len(needed_metrics(cfg.groups[0]))


def test_the_token_mix_is_read_seldom_and_carried_between_reads(tmp_path):
    from fleet.service.observe import SLOW_REFRESH_S, slow_metrics

    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=2)
        text = (tmp_path / "fleet.yaml").read_text()
        (tmp_path / "fleet.yaml").write_text(text + "    predictive: {mode: on, capacity_rps: 1.0}\n")
        cfg = load_config(tmp_path / "fleet.yaml", env={})
        ids = next(iter(cloud.ess.groups.values())).instance_ids
        for iid in ids:
            cloud.put_custom_metric("vllm_prompt_tokens_per_request", {"instanceId": iid}, 900.0)
            cloud.put_custom_metric("vllm_request_rate", {"instanceId": iid}, 2.0)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        every = len(needed_metrics(cfg.groups[0]))
        cloud.calls.clear()
        first = observer.observe(cloud.now())
        assert _calls(cloud, "DescribeMetricLast") == every
        cloud.advance(15)
        cloud.calls.clear()
        second = observer.observe(cloud.now())
        # the mix, the KV-cache use and GPU utilization that no rule of this group reads, and the GPUs' row
        # remapping (as every group), are reused
        assert slow_metrics(cfg.groups[0]) == {
            "prompt_tokens_per_request",
            "output_tokens_per_request",
            "kv_cache_usage_pct",
            "gpu_util_pct",
            "gpu_row_remap",
        }
        assert _calls(cloud, "DescribeMetricLast") == every - 5
        for obs in (first, second):
            (g,) = obs.groups.values()
            assert all(g.metrics[iid]["prompt_tokens_per_request"].value == 900.0 for iid in ids)
        cloud.advance(SLOW_REFRESH_S)
        cloud.calls.clear()
        observer.observe(cloud.now())
        # past the refresh: read again (the request rate over the whole gap: every period since the last read)
        assert _calls(cloud, "DescribeMetricLast") + _calls(cloud, "DescribeMetricList") == every
        assert _calls(cloud, "DescribeMetricList") == 1


def test_an_engine_rule_reads_the_gpus_utilization_and_a_predictive_group_once_a_minute(tmp_path):
    """A node whose vLLM reads down serves nothing only if CloudMonitor's own agent reads its GPUs idle
    (policies.launch_verdicts.serves_nothing): a group whose isolation reads vllm_up reads that too."""
    from fleet.service.observe import slow_metrics
    from policies.spec import GroupSpec

    engine = {"name": "engine_down", "metric": "vllm_up", "below": 0.5, "for": "2m", "action": "reboot"}
    base = {"name": "g", "min_size": 1, "max_size": 4}
    plain = GroupSpec.model_validate({**base, "isolation": {"rules": [engine]}})
    assert "gpu_util_pct" in needed_metrics(plain) and "gpu_util_pct" not in slow_metrics(plain)
    predictive = {"mode": "on", "capacity_rps": 1.0}
    seldom = GroupSpec.model_validate({**base, "isolation": {"rules": [engine]}, "predictive": predictive})
    assert "gpu_util_pct" in slow_metrics(seldom)
    hot = {"name": "hot", "metric": "gpu_temperature_c", "above": 85, "for": "2m", "action": "reboot"}
    without = GroupSpec.model_validate({**base, "isolation": {"rules": [hot]}})
    assert "gpu_util_pct" not in needed_metrics(without)


def test_a_metric_a_rule_reads_is_read_every_tick(tmp_path):
    from fleet.service.observe import slow_metrics

    with mock_aliyun() as cloud:
        _world(tmp_path, cloud, groups=1, instances=1)
        text = (tmp_path / "fleet.yaml").read_text()
        text = text.replace(
            "      - {metric: queue_waiting_per_instance, above: 2, for: 30s}",
            "      - {metric: queue_waiting_per_instance, above: 2, for: 30s}\n"
            "      - {metric: kv_cache_usage_pct, above: 30, for: 30s}",
        )
        (tmp_path / "fleet.yaml").write_text(text + "    predictive: {mode: on, capacity_rps: 1.0}\n")
        cfg = load_config(tmp_path / "fleet.yaml", env={})
    assert "kv_cache_usage_pct" not in slow_metrics(cfg.groups[0])
    assert "prompt_tokens_per_request" in slow_metrics(cfg.groups[0])


def test_unchanged_groups_reuse_their_instances_until_the_refresh(tmp_path):
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=3, instances=2)
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        observer = Observer(clients, cfg.groups, instances_refresh_s=300)
        observer.observe(cloud.now())
        cloud.calls.clear()
        cloud.advance(15)
        again = observer.observe(cloud.now())
        assert _calls(cloud, "DescribeScalingInstances") == 0
        assert _calls(cloud, "DescribeScalingActivities") == 0  # nothing in flight: counts at desired
        assert all(len(g.instances) == 2 for g in again.groups.values())
        # a group whose counts change is read again, with its activities
        first = next(iter(cloud.ess.groups))
        clients.ess.scale_to(first, 3, client_token="t-batched-1")
        cloud.calls.clear()
        observer.observe(cloud.now())
        assert _calls(cloud, "DescribeScalingInstances") == 1
        assert _calls(cloud, "DescribeScalingActivities") == 1
        cloud.advance(301)
        cloud.calls.clear()
        observer.observe(cloud.now())
        assert _calls(cloud, "DescribeScalingInstances") == 3  # the refresh is due for every group
        # due by time only for the two untouched groups: no activity read; the scaled one changed counts
        assert _calls(cloud, "DescribeScalingActivities") == 1


def test_large_fleets_read_metrics_by_namespace_and_ecs_by_exception(tmp_path):
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=3, instances=90, isolation=True)  # 270 instances
        hot = next(iter(next(iter(cloud.ess.groups.values())).instance_ids))
        cloud.publish_metric("acs_ecs_dashboard", "instance_gpu_gpu_temperature", {"instanceId": hot}, 91)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        cloud.calls.clear()
        obs = observer.observe(cloud.now())
        # 270 instances in dimension batches of 50 would be 6 calls per metric; the namespace scan is 1 page
        assert _calls(cloud, "DescribeMetricLast") == len(needed_metrics(cfg.groups[0]))
        assert _calls(cloud, "DescribeInstancesFullStatus") == 2  # Impaired, and with an active event
        owner = next(g for g in obs.groups.values() if hot in {i.instance_id for i in g.instances})
        assert owner.metrics[hot]["gpu_temperature_c"].value == 91
        others = [g for g in obs.groups.values() if g is not owner]
        assert all("gpu_temperature_c" not in m for g in others for m in g.metrics.values())


def test_pools_run_a_products_reads_on_several_threads_and_count_them():
    pools = CallPools(workers=4)
    seen: set[str] = set()
    barrier = threading.Barrier(4, timeout=5)

    def work(n: int) -> int:
        barrier.wait()  # only passes when four run at once
        seen.add(threading.current_thread().name)
        return n * 2

    try:
        assert pools.run("ess", work, [1, 2, 3, 4]) == [2, 4, 6, 8]
    finally:
        pools.close()
    assert len(seen) == 4


def test_pool_errors_come_back_in_place():
    pools = CallPools(workers=1)

    def work(n: int) -> int:
        if n == 2:
            raise ValueError("two")
        return n

    out = pools.run("cms", work, [1, 2, 3])
    assert out[0] == 1 and out[2] == 3 and isinstance(out[1], ValueError)


def test_token_bucket_holds_the_rate():
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    bucket = TokenBucket(10.0, burst=1.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(11):
        bucket.acquire()
    assert now[0] == pytest.approx(1.0)  # the first is free, ten more at 10/s take a second


def test_pools_throttle_unless_told_the_cloud_has_no_budget():
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    items = list(range(100))
    limited = CallPools({"cms": 10.0}, workers=1, clock=lambda: now[0], sleep=sleep)
    assert limited.run("cms", lambda n: n, items) == items
    assert sum(slept) > 5  # 100 reads at 10/s past a small burst
    slept.clear()
    free = CallPools({"cms": 10.0}, workers=1, clock=lambda: now[0], sleep=sleep, rate_limited=False)
    assert free.run("cms", lambda n: n, items) == items
    assert slept == []


def test_simulated_service_observes_inline_and_unthrottled(tmp_path):
    from fleet.sim import cloudview

    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=1)
    assert ServiceSettings.from_config(cfg).call_rate_limit is True  # production keeps the budget
    settings = cloudview.service_settings(cfg, tick_s=60.0)
    assert settings.call_rate_limit is False and settings.observe_workers == 1


def test_the_simulated_service_keeps_its_lease_between_the_simulations_ticks(tmp_path):
    """The simulation ticks every 60 s where the config's lease was sized for its 15 s tick: the lease lapsed
    between ticks, and each tick took it again under a new epoch, as a replica taking over would (its groups'
    demand read again from the store, its scheduled tasks synced again)."""
    from fleet.service import build_service
    from fleet.service.notify import Notifier
    from fleet.sim import cloudview

    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=1)
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        settings = cloudview.service_settings(cfg, tick_s=60.0)
        svc = build_service(cfg, clients, clock=cloud.now, notifier=Notifier([]), settings=settings)
        epochs = []
        try:
            for _ in range(3):
                svc.tick(cloud.now())
                epochs.append(dict(svc.owned))
                cloud.advance(60)
        finally:
            svc.close()
    assert epochs == [{0: 1}] * 3


def test_count_calls_nests():
    from fleet.cloud.retry import call

    with count_calls() as outer:
        call(FAST, "ess", "A", lambda: None)
        with count_calls() as inner:
            call(FAST, "ess", "B", lambda: None)
    assert outer == {"A": 1, "B": 1} and inner == {"B": 1}


def test_running_and_waiting_are_read_once_a_minute_unless_a_drain_watches_them(tmp_path):
    from fleet.service.observe import slow_metrics

    with mock_aliyun() as cloud:
        _world(tmp_path, cloud, groups=1, instances=1)
        base = (tmp_path / "fleet.yaml").read_text() + "    predictive: {mode: on, capacity_rps: 1.0}\n"
        (tmp_path / "fleet.yaml").write_text(base)
        watched = load_config(tmp_path / "fleet.yaml", env={}).groups[0]
        (tmp_path / "fleet.yaml").write_text(base + "    isolation: {enabled: false}\n")
        unwatched = load_config(tmp_path / "fleet.yaml", env={}).groups[0]
    counts = {"requests_running", "queue_waiting"}
    assert counts <= needed_metrics(watched) and counts <= needed_metrics(unwatched)
    assert not counts & slow_metrics(watched)  # isolation drains watch them every tick
    # without a drain only Little's law reads the running requests (smoothed over minutes); the waiting ones
    # stay every tick, the group's queue rule reading them
    assert "requests_running" in slow_metrics(unwatched)
    assert "queue_waiting" not in slow_metrics(unwatched)


def _predictive_world(tmp_path, cloud, instances: int):
    _world(tmp_path, cloud, groups=1, instances=instances)
    text = (tmp_path / "fleet.yaml").read_text()
    (tmp_path / "fleet.yaml").write_text(text + "    predictive: {mode: on, capacity_rps: 1.0}\n")
    return load_config(tmp_path / "fleet.yaml", env={})


def _rate(obs, iid: str):
    (g,) = obs.groups.values()
    return g.metrics[iid].get("request_rate")


def test_a_tick_longer_than_the_agents_period_reads_the_request_rate_over_the_whole_gap(tmp_path):
    """The agent publishes the rate over each 15 s period. Ticking every 60 s, the service reads every period
    since the last point it used and takes their mean (the rate over the minute), not the last period alone;
    ticking every 15 s it reads the last point, as before."""
    with mock_aliyun() as cloud:
        cfg = _predictive_world(tmp_path, cloud, instances=2)
        a, b = next(iter(cloud.ess.groups.values())).instance_ids
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        cloud.put_custom_metric("vllm_request_rate", {"instanceId": a}, 5.0)
        cloud.put_custom_metric("vllm_request_rate", {"instanceId": b}, 1.0)
        assert _rate(observer.observe(cloud.now()), a).value == 5.0
        for value in (1.0, 2.0, 3.0, 4.0):  # four periods of a; b publishes nothing more
            cloud.advance(15)
            cloud.put_custom_metric("vllm_request_rate", {"instanceId": a}, value)
        cloud.calls.clear()
        obs = observer.observe(cloud.now())
        assert _calls(cloud, "DescribeMetricList") == 1
        assert _rate(obs, a).value == pytest.approx(2.5)
        assert 0 <= (cloud.now() - _rate(obs, a).at).total_seconds() < 15  # the newest period's
        old_b = _rate(obs, b)
        assert old_b.value == 1.0  # nothing newer: its last sample, as the last point would be
        assert (cloud.now() - old_b.at).total_seconds() == pytest.approx(60, abs=1)
        cloud.advance(15)
        cloud.put_custom_metric("vllm_request_rate", {"instanceId": a}, 8.0)
        cloud.calls.clear()
        obs = observer.observe(cloud.now())  # 15 s on: the last point
        assert _calls(cloud, "DescribeMetricList") == 0
        assert _rate(obs, a).value == 8.0


def test_a_tick_gap_longer_than_ten_minutes_reads_the_rate_over_the_last_ten(tmp_path):
    from fleet.service.observe import SPAN_MAX_S

    with mock_aliyun() as cloud:
        cfg = _predictive_world(tmp_path, cloud, instances=1)
        (a,) = next(iter(cloud.ess.groups.values())).instance_ids
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        cloud.put_custom_metric("vllm_request_rate", {"instanceId": a}, 1.0)
        observer.observe(cloud.now())
        periods = int(2 * SPAN_MAX_S // 15)
        for k in range(periods):  # 20 minutes: 1 req/s in the first ten, 2 and 4 in turn in the last ten
            cloud.advance(15)
            value = 1.0 if k < periods // 2 else (2.0 if k % 2 == 0 else 4.0)
            cloud.put_custom_metric("vllm_request_rate", {"instanceId": a}, value)
        cloud.calls.clear()
        obs = observer.observe(cloud.now())
        assert _calls(cloud, "DescribeMetricList") == 1
        assert _rate(obs, a).value == pytest.approx(3.0)  # not the last period's 4, nor 2 over twenty minutes


def test_a_seldom_read_is_reread_before_its_points_go_stale(tmp_path):
    """The token mix is reused up to SLOW_REFRESH_S, less where the group's stale_after is short: ticking
    every 15 s for five minutes, each point 10 s old when read, every tick's reused sample stays fresh."""
    from fleet.service.observe import SLOW_REFRESH_S, slow_refresh_s

    with mock_aliyun() as cloud:
        cfg = _predictive_world(tmp_path, cloud, instances=1)
        text = (tmp_path / "fleet.yaml").read_text()
        (tmp_path / "fleet.yaml").write_text(text + "    stabilization: {stale_after: 45s}\n")
        short = load_config(tmp_path / "fleet.yaml", env={})
        assert slow_refresh_s(cfg.groups[0]) == SLOW_REFRESH_S  # the default stale_after leaves room
        assert slow_refresh_s(short.groups[0]) < SLOW_REFRESH_S
        (a,) = next(iter(cloud.ess.groups.values())).instance_ids
        reads: dict[float, int] = {}
        for spec, stale_s in ((cfg.groups[0], 120.0), (short.groups[0], 45.0)):
            observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), [spec])
            seen = set()
            for _ in range(20):
                cloud.put_custom_metric("vllm_prompt_tokens_per_request", {"instanceId": a}, 900.0)
                cloud.advance(10)
                (g,) = observer.observe(cloud.now()).groups.values()
                sample = g.metrics[a]["prompt_tokens_per_request"]
                assert (cloud.now() - sample.at).total_seconds() <= stale_s
                seen.add(sample.at)  # a new point each tick: one time per read
                cloud.advance(5)
            reads[stale_s] = len(seen)
        assert reads[120.0] <= 300 / SLOW_REFRESH_S + 1  # five minutes: one read per refresh
        assert reads[45.0] > reads[120.0]


def test_a_read_that_keeps_failing_is_logged_when_it_starts_then_every_five_minutes(fake_world, caplog):
    group = (
        "min_size: 1\nmax_size: 20\n"
        "scale_out:\n  - {metric: queue_waiting_per_instance, above: 2, for: 30s}\n"
        "isolation: {enabled: false}\n"
    )
    cloud, svc, _ = fake_world(group)
    cloud.inject_fault("DescribeMetricLast", code="ServiceUnavailable", status=503)  # until lifted
    with caplog.at_level(logging.WARNING, logger="fleet.service.observe"):
        for _ in range(80):  # 20 minutes of 15 s ticks
            assert svc.tick(cloud.now()).errors
            cloud.advance(15)
    lines = [r.getMessage() for r in caplog.records if "vllm_num_requests_waiting" in r.getMessage()]
    assert lines[0].startswith("observe vllm_num_requests_waiting failed")
    assert len(lines) == 4  # the first failure, then one line at 5, 10 and 15 minutes
    assert all("still failing (19 failures since" in line for line in lines[1:])


def test_a_failure_after_a_quiet_spell_is_logged_as_new(caplog):
    failures = FailureLog(every_s=300.0)
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    with caplog.at_level(logging.WARNING, logger="fleet.service.observe"):
        for s in (0, 15, 30, 30 + 301):  # a break longer than the interval: a new failure
            failures.failed("vllm_up", CloudError("ServiceUnavailable", "down"), t0 + timedelta(seconds=s))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all(line.startswith("observe vllm_up failed") for line in lines)


def test_a_latency_rule_reads_what_tells_an_idle_instance_from_a_missing_one():
    from policies import GroupSpec

    def spec(metric: str) -> GroupSpec:
        return GroupSpec.model_validate(
            {
                "name": "g",
                "min_size": 1,
                "max_size": 4,
                "isolation": {"enabled": False},
                "scale_out": [{"metric": metric, "above": 3000 if "ms" in metric else 2, "for": "30s"}],
            }
        )

    assert {"queue_waiting", "requests_running"} <= needed_metrics(spec("ttft_p99_ms"))
    assert "requests_running" not in needed_metrics(spec("queue_waiting_per_instance"))


def test_with_ess_unreadable_a_group_is_watched_on_its_last_instance_list_while_that_is_recent(tmp_path):
    from fleet.service.observe import BLIND_MAX_AGE_S

    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=3, isolation=True)
        ids = sorted(next(iter(cloud.ess.groups.values())).instance_ids)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        assert observer.observe(cloud.now()).groups["g0"].ok
        cloud.inject_fault(None, code="ServiceUnavailable", status=503, product="ess")
        cloud.advance(60)
        for iid in ids:
            cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 3.0)
        g = observer.observe(cloud.now()).groups["g0"]
        assert not g.ok and g.blind and g.errors
        assert sorted(i.instance_id for i in g.instances) == ids
        assert {iid: m["queue_waiting"].value for iid, m in g.metrics.items()} == dict.fromkeys(ids, 3.0)
        assert set(g.health) == set(ids)  # ECS health read for isolation
        cloud.advance(4.5 * 3600)  # past isolate_within, where a 6-hour outage once stopped the watch
        assert observer.observe(cloud.now()).groups["g0"].blind
        cloud.advance(BLIND_MAX_AGE_S - 4.5 * 3600)
        late = observer.observe(cloud.now()).groups["g0"]
        assert not late.ok and not late.blind and not late.instances  # too old a list to stand for the group


class _Buggy:
    """A metric source with a bug in one metric's read: it raises something that is no ``CloudError``."""

    kind = "buggy"

    def __init__(self, inner, broken: str) -> None:
        self.inner = inner
        self.broken = broken

    def describe(self, canonical: str) -> str:
        return f"buggy {canonical}"

    def read_last(self, canonical, instance_ids):
        if canonical == self.broken:
            raise KeyError("resultType")  # a bug, not a failed call
        return self.inner.read_last(canonical, instance_ids)

    def read_range(self, canonical, instance_ids, start, end, step_s=15):
        return self.inner.read_range(canonical, instance_ids, start, end, step_s)

    def take_warnings(self, canonical):
        return self.inner.take_warnings(canonical)


def test_a_bug_in_one_sources_read_leaves_that_metric_unknown_not_the_scope_unobserved(tmp_path, caplog):
    """A source raising something other than a CloudError used to end the whole scope's observation: every
    group of the region went unobserved, and its traceback was logged each tick."""
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=2, instances=2)
        for group in cloud.ess.groups.values():
            for iid in group.instance_ids:
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 7.0)
        errors: list[CloudError] = []
        observer = Observer(
            make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups, on_error=errors.append
        )
        observer.sources["g0"] = _Buggy(observer.sources["g0"], "queue_waiting")
        with caplog.at_level(logging.DEBUG, logger="fleet.service.observe"):
            obs = observer.observe(cloud.now())
            again = observer.observe(cloud.now() + timedelta(seconds=15))
        for o in (obs, again):
            g0, g1 = o.groups["g0"], o.groups["g1"]
            assert g0.ok and g1.ok
            assert g0.staleness_s["queue_waiting"] is None
            assert not any("queue_waiting" in m for m in g0.metrics.values())
            assert any("KeyError" in e for e in g0.errors)
            assert all(m["queue_waiting"].value == 7.0 for m in g1.metrics.values()) and g1.metrics
        assert [e.code for e in errors] == ["Source.UnexpectedError"] * 2
        lines = [r for r in caplog.records if "buggy queue_waiting" in r.getMessage()]
        errors_logged = [r for r in lines if r.levelno >= logging.ERROR]
        assert len(errors_logged) == 1 and errors_logged[0].exc_info is None  # one line, once
        assert any(r.levelno == logging.DEBUG and r.exc_info for r in lines)  # the traceback, at debug


class _Warning(_Buggy):
    """A metric source that answers every read and warns of the same thing each time."""

    def read_last(self, canonical, instance_ids):
        return self.inner.read_last(canonical, instance_ids)

    def take_warnings(self, canonical):
        return ["store 10.0.0.7:10901 is unavailable"] if canonical == self.broken else []


def test_a_source_warning_repeated_every_tick_is_logged_once_and_kept_for_status(tmp_path, caplog):
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=1)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        observer.sources["g0"] = _Warning(observer.sources["g0"], "queue_waiting")
        with caplog.at_level(logging.WARNING):
            seen = [observer.observe(cloud.now() + timedelta(seconds=15 * k)).groups["g0"] for k in range(4)]
        assert all(
            g.source_warnings == [("queue_waiting", "buggy: store 10.0.0.7:10901 is unavailable")]
            for g in seen
        )
        lines = [r.getMessage() for r in caplog.records if "10.0.0.7" in r.getMessage()]
        assert len(lines) == 1 and "buggy queue_waiting" in lines[0]


def _short_second_pages(clients, monkeypatch, walks: int | None = None):
    """ESS answers page 2 of DescribeScalingInstances ten rows short (TotalCount unchanged), for the first
    ``walks`` walks (None: always), as an answer cut short in the middle of a listing would."""
    sdk = clients.ess._client
    real = sdk.describe_scaling_instances
    shorted = []

    def answer(req):
        resp = real(req)
        if req.page_number == 2 and (walks is None or len(shorted) < walks):
            shorted.append(req.page_number)
            resp.body.scaling_instances = resp.body.scaling_instances[:-10]
        return resp

    monkeypatch.setattr(sdk, "describe_scaling_instances", answer)


def test_a_listing_cut_short_leaves_the_group_unread_not_smaller(tmp_path, monkeypatch, caplog):
    """A partial instance list taken for the fleet reads as instances gone (or a fleet smaller than it
    runs): the group is unreadable this tick, logged with the counts, and nothing is decided on it."""
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=70)
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        _short_second_pages(clients, monkeypatch)
        observer = Observer(clients, cfg.groups)
        with caplog.at_level(logging.WARNING, logger="fleet.service.observe"):
            obs = observer.observe(cloud.now())
        (g,) = obs.groups.values()
        assert not g.ok and g.instances == []
        assert (
            "IncompleteListing" in g.errors[0]
            and "60 items in 2 page(s) against TotalCount 70" in g.errors[0]
        )
        assert [r.getMessage() for r in caplog.records if "IncompleteListing" in r.getMessage()] != []


def test_a_listing_cut_short_once_is_read_again_whole(tmp_path, monkeypatch):
    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=70)
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        _short_second_pages(clients, monkeypatch, walks=1)
        obs = Observer(clients, cfg.groups).observe(cloud.now())
        (g,) = obs.groups.values()
        assert g.ok and len(g.instances) == 70


def test_row_remapping_is_read_once_a_minute_by_every_group_predictive_or_not(tmp_path):
    """The default rules' gpu_row_remap was one more CloudMonitor read every tick for every group: a GPU's
    memory wearing out is answered within the respond window read once a minute, and the monthly call
    budget is shared by every read."""
    from fleet.service.observe import SLOW_REFRESH_S, slow_metrics

    with mock_aliyun() as cloud:
        cfg = _world(tmp_path, cloud, groups=1, instances=2)
        (spec,) = cfg.groups
        assert spec.predictive.mode == "off" and "gpu_row_remap" in needed_metrics(spec)
        assert slow_metrics(spec) == {"gpu_row_remap"}
        first = sorted(next(iter(cloud.ess.groups.values())).instance_ids)[0]
        cloud.put_custom_metric("gpu_row_remap", {"instanceId": first}, 1.0)
        observer = Observer(make_clients(REGION, cloud.account_id, retry=FAST, env=ENV), cfg.groups)
        every = len(needed_metrics(spec))
        observer.observe(cloud.now())
        cloud.advance(15)
        cloud.calls.clear()
        second = observer.observe(cloud.now())
        assert _calls(cloud, "DescribeMetricLast") == every - 1
        (g,) = second.groups.values()
        assert g.metrics[first]["gpu_row_remap"].value == 1.0  # carried from the read before
        cloud.advance(SLOW_REFRESH_S)
        cloud.calls.clear()
        observer.observe(cloud.now())
        assert _calls(cloud, "DescribeMetricLast") + _calls(cloud, "DescribeMetricList") == every


def test_per_gpu_points_combine_to_the_instances_worst_gpu():
    """A per-GPU series (gpuId) becomes one sample: the hottest GPU's temperature, every GPU's throttle
    reasons, and the slowest GPU's SM clock ratio (one card at 55 % of its clock holds back a tensor-parallel
    instance whose other card runs at full clock)."""
    at = datetime(2026, 3, 2, tzinfo=UTC)

    def points(metric: str, *values: float) -> list[MetricPoint]:
        return [
            MetricPoint("ns", metric, "i-1", at + timedelta(seconds=n), v, {"gpuId": str(n)})
            for n, v in enumerate(values)
        ]

    assert combine(pm.GPU_SM_CLOCK_RATIO, points("gpu_sm_clock_ratio", 1.0, 0.55)).value == 0.55
    assert combine(pm.GPU_TEMPERATURE_C, points("t", 61.0, 88.0)).value == 88.0
    assert combine(pm.GPU_THROTTLE_REASONS, points("r", 4.0, 32.0)).value == 36.0
    assert combine(pm.GPU_SM_CLOCK_RATIO, points("gpu_sm_clock_ratio", 0.7)).at == at
