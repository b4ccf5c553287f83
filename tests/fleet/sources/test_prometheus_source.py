"""PrometheusSource against a scripted Prometheus HTTP API on 127.0.0.1: PromQL, matching, times, errors."""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.errors import CloudError, InvalidRequest, NetworkError, ServerError, Throttled
from fleet.cloud.retry import RetryPolicy
from fleet.config import GroupConfig
from fleet.service.observe import Observer
from fleet.service.sources import PROMQL_MAPPINGS, CloudMonitorSource, PrometheusSource, source_for
from fleet.service.sources.prometheus import promql_string, regex_alternation
from policies import metrics as pm
from policies.spec import GroupSpec

from .conftest import ENV, REGION, free_port, matrix, vector

FAST = RetryPolicy(attempts=1, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)
TOKEN_ENV = "FLEET_TEST_PROM_TOKEN"
EVAL_AT = 1_700_000_100.0  # the evaluation time the fake stamps instant results with


def _answer_by_kind(values, fresh):
    """Value queries get ``values``; the freshness query (timestamp()) gets ``fresh``."""

    def answer(endpoint, form):
        rows = fresh if form["query"].startswith("max by") and "timestamp(" in form["query"] else values
        return 200, vector(rows, at=EVAL_AT)

    return answer


def test_every_canonical_instance_metric_has_a_promql_mapping():
    assert set(PROMQL_MAPPINGS) == set(pm.INSTANCE_METRICS)


def test_query_restricts_to_the_group_instances_and_the_configured_labels(prom_api):
    src = PrometheusSource(prom_api.url, labels={"cluster": "prod"})
    src.read_last(pm.QUEUE_WAITING, ["i-b", "i-a"])
    value_query = prom_api.queries()[0]
    assert 'instance_id=~"i-a|i-b"' in value_query
    assert 'cluster="prod"' in value_query
    assert value_query.startswith("sum by (instance_id) (vllm:num_requests_waiting{")


def test_results_are_matched_to_instances_by_the_instance_label(prom_api):
    prom_api.answer = _answer_by_kind(
        [({"instance_id": "i-a"}, 3), ({"instance_id": "i-other"}, 9), ({}, 1)],
        [({"instance_id": "i-a"}, EVAL_AT - 2)],
    )
    points = PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a", "i-b"])
    assert [(p.instance_id, p.value) for p in points] == [("i-a", 3.0)]


def test_a_configured_instance_label_is_used_to_select_group_and_match(prom_api):
    prom_api.answer = _answer_by_kind([({"ecs_id": "i-a"}, 4)], [({"ecs_id": "i-a"}, EVAL_AT - 1)])
    points = PrometheusSource(prom_api.url, instance_label="ecs_id").read_last(pm.REQUESTS_RUNNING, ["i-a"])
    assert [(p.instance_id, p.value) for p in points] == [("i-a", 4.0)]
    assert all("sum by (ecs_id)" in q or "max by (ecs_id)" in q for q in prom_api.queries())


def test_point_time_is_the_newest_raw_sample_not_the_evaluation_time(prom_api):
    scraped_at = EVAL_AT - 42.5
    prom_api.answer = _answer_by_kind([({"instance_id": "i-a"}, 70)], [({"instance_id": "i-a"}, scraped_at)])
    [point] = PrometheusSource(prom_api.url, clock=lambda: EVAL_AT).read_last(pm.GPU_TEMPERATURE_C, ["i-a"])
    assert point.timestamp == datetime.fromtimestamp(scraped_at, UTC)


def test_freshness_query_reads_the_timestamps_of_every_series_the_metric_uses(prom_api):
    PrometheusSource(prom_api.url).read_last(pm.GPU_MEM_USED_PCT, ["i-a"])
    fresh = [q for q in prom_api.queries() if "timestamp(" in q]
    assert fresh
    assert "timestamp(DCGM_FI_DEV_FB_USED{" in fresh[0] and "timestamp(DCGM_FI_DEV_FB_FREE{" in fresh[0]


def test_empty_result_means_unknown_not_zero(prom_api):
    prom_api.answer = lambda e, f: (200, vector([]))
    assert PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"]) == []


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_non_finite_values_give_no_point(prom_api, value):
    prom_api.answer = _answer_by_kind([({"instance_id": "i-a"}, value)], [({"instance_id": "i-a"}, EVAL_AT)])
    assert PrometheusSource(prom_api.url).read_last(pm.TTFT_P99_MS, ["i-a"]) == []


def test_per_gpu_metrics_keep_the_gpu_as_a_dimension(prom_api):
    prom_api.answer = _answer_by_kind(
        [({"instance_id": "i-a", "gpu": "0"}, 4), ({"instance_id": "i-a", "gpu": "1"}, 64)],
        [({"instance_id": "i-a"}, EVAL_AT)],
    )
    points = PrometheusSource(prom_api.url).read_last(pm.GPU_THROTTLE_REASONS, ["i-a"])
    assert sorted((p.dimensions["gpu"], p.value) for p in points) == [("0", 4.0), ("1", 64.0)]


def test_no_instances_means_no_query(prom_api):
    assert PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, []) == []
    assert prom_api.requests == []


def test_promql_error_becomes_an_invalid_request_with_the_error_type(prom_api):
    prom_api.answer = lambda e, f: (
        400,
        {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
    )
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.bad_data" and "parse error" in info.value.message


def test_server_error_becomes_a_server_error(prom_api):
    prom_api.answer = lambda e, f: (503, {"status": "error", "errorType": "unavailable", "error": "busy"})
    with pytest.raises(ServerError) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.unavailable" and info.value.status == 503


def test_an_answer_that_is_not_the_prometheus_api_is_a_server_error(prom_api):
    prom_api.answer = lambda e, f: (200, "<html>a proxy login page</html>")
    with pytest.raises(ServerError) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.BadResponse"


def test_a_malformed_result_is_a_server_error_not_a_crash(prom_api):
    prom_api.answer = lambda e, f: (
        200,
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
    )
    with pytest.raises(ServerError):
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])


def test_unreachable_prometheus_is_a_network_error():
    src = PrometheusSource(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(NetworkError) as info:
        src.read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.Unreachable"


def _xid_source(prom_api, series, now):
    prom_api.answer = lambda e, f: (200, matrix(series))
    return PrometheusSource(prom_api.url, xid_lookback_s=300, xid_step_s=30, clock=lambda: now)


def test_xid_is_dated_when_the_gauge_took_its_value(prom_api):
    now = 1_699_999_980.0  # a multiple of 30 (the step)
    grid = [now - 300 + 30 * k for k in range(11)]
    values = [0.0] * 6 + [79.0] * 5
    src = _xid_source(
        prom_api, [({"instance_id": "i-a", "gpu": "1"}, list(zip(grid, values, strict=True)))], now
    )
    [point] = src.read_last(pm.GPU_XID, ["i-a"])
    assert point.value == 79 and point.timestamp == datetime.fromtimestamp(grid[6], UTC)
    assert point.dimensions["gpu"] == "1"


def test_xid_date_is_the_same_on_the_next_tick(prom_api):
    now = 1_699_999_980.0
    grid = [now - 300 + 30 * k for k in range(11)]
    values = [0.0] * 6 + [79.0] * 5
    first = _xid_source(prom_api, [({"instance_id": "i-a"}, list(zip(grid, values, strict=True)))], now)
    [a] = first.read_last(pm.GPU_XID, ["i-a"])
    later_grid = grid[1:] + [now + 30]
    later_values = values[1:] + [79.0]
    second = _xid_source(
        prom_api, [({"instance_id": "i-a"}, list(zip(later_grid, later_values, strict=True)))], now + 40
    )
    [b] = second.read_last(pm.GPU_XID, ["i-a"])
    assert a.timestamp == b.timestamp


def test_range_query_for_xids_is_aligned_to_the_step(prom_api):
    _xid_source(prom_api, [], 1_700_000_017.0).read_last(pm.GPU_XID, ["i-a"])
    [(endpoint, form)] = prom_api.requests
    assert endpoint == "query_range"
    assert float(form["end"]) % 30 == 0 and float(form["start"]) == float(form["end"]) - 300


def test_xid_unchanged_over_the_whole_lookback_is_left_out(prom_api):
    now = 1_699_999_980.0
    grid = [now - 300 + 30 * k for k in range(11)]
    src = _xid_source(prom_api, [({"instance_id": "i-a"}, [(t, 79.0) for t in grid])], now)
    assert src.read_last(pm.GPU_XID, ["i-a"]) == []


def test_no_xid_reads_as_code_zero(prom_api):
    now = 1_699_999_980.0
    grid = [now - 60, now - 30, now]
    src = _xid_source(prom_api, [({"instance_id": "i-a"}, [(t, 0.0) for t in grid])], now)
    [point] = src.read_last(pm.GPU_XID, ["i-a"])
    assert point.value == 0


def test_read_range_returns_a_point_per_step(prom_api):
    prom_api.answer = lambda e, f: (200, matrix([({"instance_id": "i-a"}, [(100.0, 1.0), (115.0, 2.0)])]))
    points = PrometheusSource(prom_api.url).read_range(
        pm.QUEUE_WAITING, ["i-a"], datetime.fromtimestamp(100, UTC), datetime.fromtimestamp(115, UTC), 15
    )
    assert [p.value for p in points] == [1.0, 2.0]
    assert prom_api.requests[0][1]["step"] == "15"


def test_regex_and_string_literals_are_escaped():
    assert regex_alternation(["i-a.b", "i-c"]) == "i-a\\.b|i-c"
    assert promql_string('a"b\\c') == '"a\\"b\\\\c"'


def test_label_names_are_checked():
    with pytest.raises(ValueError, match="label name"):
        PrometheusSource("http://127.0.0.1:9", labels={"bad-name": "x"})
    with pytest.raises(ValueError, match="instance label"):
        PrometheusSource("http://127.0.0.1:9", labels={"instance_id": "i-a"})


def test_a_spec_without_metrics_source_reads_cloudmonitor():
    class Clients:
        cms = object()

    spec = GroupSpec(name="chat", scaling_group_id="asg-1", min_size=1, max_size=2)
    assert isinstance(source_for(spec, Clients()), CloudMonitorSource)


def test_observer_records_a_failed_prometheus_read_and_goes_on(aliyun_server):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused
    cloud = aliyun_server.cloud
    gid = cloud.create_group_for_tests(name="chat", desired_capacity=1, in_service=1, region_id=REGION)
    clients = make_clients(REGION, cloud.account_id, endpoint=aliyun_server.endpoint, retry=FAST, env=ENV)
    spec = GroupConfig(
        name="chat",
        scaling_group_id=gid,
        min_size=1,
        max_size=2,
        scale_out=[{"metric": "queue_waiting_per_instance", "above": 2, "for": "30s"}],
        isolation={"enabled": False},
        metrics_source={"type": "prometheus", "url": url},
    )
    errors: list[CloudError] = []
    obs = Observer(clients, [spec], on_error=errors.append).observe(cloud.now())
    g = obs.groups["chat"]
    assert g.ok and len(g.instances) == 1
    assert [e.code for e in errors] == ["Prometheus.Unreachable"]
    assert g.metrics == {} and g.staleness_s[pm.QUEUE_WAITING] is None
    assert not [c for c in cloud.calls if c[0] == "cms"]  # a Prometheus group never reads CloudMonitor


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_named_with_its_target_not_followed(prom_api, status):
    # a reverse proxy serving Prometheus under /prometheus/: a 302 used to turn the POST into a GET without
    # the query, answered "invalid parameter query"
    prom_api.answer = lambda e, f: (status, "", {"location": f"/prometheus/api/v1/{e}"})
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.Redirected"
    assert "/prometheus/api/v1/query" in info.value.message and "url" in info.value.message
    assert len(prom_api.requests) == 1


def test_basic_auth_credentials_in_the_url_are_sent_and_never_shown(prom_api):
    url = prom_api.url.replace("http://", "http://fleet:s3cret-pw@")
    prom_api.answer = lambda e, f: (401, "<html>401 Authorization Required</html>")
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert prom_api.authorizations[0] == "Basic " + base64.b64encode(b"fleet:s3cret-pw").decode()
    assert "s3cret-pw" not in str(info.value) and "fleet:***@" in info.value.message
    assert info.value.code == "Prometheus.HTTP401" and "credentials" in info.value.message


def test_an_unreachable_url_with_credentials_does_not_show_the_password():
    src = PrometheusSource(f"http://fleet:s3cret-pw@127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(NetworkError) as info:
        src.read_last(pm.QUEUE_WAITING, ["i-a"])
    assert "s3cret-pw" not in str(info.value)


def test_a_refusal_says_how_to_give_credentials(prom_api):
    prom_api.answer = lambda e, f: (403, {"status": "error", "errorType": "forbidden", "error": "no tenant"})
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert "no tenant" in info.value.message and "bearer_token_env" in info.value.message


@pytest.mark.parametrize(("retry_after", "expected"), [("7", 7.0), (None, None), ("Wed, 21 Oct 2026", None)])
def test_a_rate_limited_query_is_throttling_with_the_wait_asked(prom_api, retry_after, expected):
    """Mimir and proxies answer 429 with a text body: it read as "not a Prometheus API answer", an invalid
    request, where the server only asked the caller to slow down."""
    headers = {"retry-after": retry_after} if retry_after else {}
    prom_api.answer = lambda e, f: (429, "too many outstanding requests", headers)
    with pytest.raises(Throttled) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.HTTP429" and info.value.retry_after_s == expected


def test_the_bearer_token_from_the_named_environment_variable_is_sent(prom_api, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_PROM_TOKEN", "tok-123")
    spec = GroupConfig(
        name="chat",
        scaling_group_id="asg-1",
        min_size=1,
        max_size=2,
        metrics_source={
            "type": "prometheus",
            "url": prom_api.url,
            "bearer_token_env": "FLEET_TEST_PROM_TOKEN",
        },
    )
    source_for(spec, clients=None).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert prom_api.authorizations and set(prom_api.authorizations) == {"Bearer tok-123"}


def test_an_unset_bearer_token_variable_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("FLEET_TEST_PROM_TOKEN", raising=False)
    spec = GroupConfig(
        name="chat",
        scaling_group_id="asg-1",
        min_size=1,
        max_size=2,
        metrics_source={
            "type": "prometheus",
            "url": "http://p:9090",
            "bearer_token_env": "FLEET_TEST_PROM_TOKEN",
        },
    )
    with pytest.raises(ValueError, match="FLEET_TEST_PROM_TOKEN is not set"):
        source_for(spec, clients=None)


def test_a_partial_answer_is_an_error_not_a_smaller_sum(prom_api):
    # VictoriaMetrics cluster with a vmstorage node down: the sum over an instance's vLLM servers is short
    answer = vector([({"instance_id": "i-a"}, 3)])
    prom_api.answer = lambda e, f: (200, {**answer, "isPartial": True})
    with pytest.raises(ServerError) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.PartialResponse"


def test_thanos_is_asked_for_a_complete_answer_or_an_error(prom_api):
    PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert {form.get("partial_response") for _, form in prom_api.requests} == {"false"}


def test_a_prometheus_slower_than_the_configured_timeout_is_a_network_error(prom_api):
    released = threading.Event()

    def slow(endpoint, form):
        released.wait(5)  # far beyond the timeout below; released as soon as the read gave up
        return 200, vector([])

    prom_api.answer = slow
    spec = GroupConfig(
        name="chat",
        scaling_group_id="asg-1",
        min_size=1,
        max_size=2,
        metrics_source={"type": "prometheus", "url": prom_api.url, "timeout_s": 0.2},
    )
    try:
        with pytest.raises(NetworkError) as info:
            source_for(spec, clients=None).read_last(pm.QUEUE_WAITING, ["i-a"])
    finally:
        released.set()
    assert info.value.code == "Prometheus.Unreachable" and "timed out" in info.value.message.lower()


@pytest.mark.parametrize("send_length", [True, False])
def test_an_answer_over_the_size_limit_is_refused_naming_the_query_and_the_limit(prom_api, send_length):
    """A query matching far more series than a group has (a dropped matcher, a huge Prometheus) was read
    whole into memory, however large."""
    prom_api.send_length = send_length
    rows = [({"instance_id": f"i-{n}", "pod": "x" * 40}, n) for n in range(2000)]  # ~150 kB
    prom_api.answer = lambda e, f: (200, vector(rows))
    src = PrometheusSource(prom_api.url, max_answer_bytes=64 * 1024)
    with pytest.raises(CloudError) as info:
        src.read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.AnswerTooLarge"
    assert "vllm:num_requests_waiting" in info.value.message and "65536 bytes" in info.value.message
    assert "max_answer_mib" in info.value.message


def test_an_answer_within_the_size_limit_is_read(prom_api):
    prom_api.send_length = False
    prom_api.answer = _answer_by_kind([({"instance_id": "i-a"}, 3)], [({"instance_id": "i-a"}, EVAL_AT)])
    points = PrometheusSource(prom_api.url, max_answer_bytes=64 * 1024).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert [p.value for p in points] == [3.0]


def test_the_answer_size_limit_is_configured_in_mib():
    spec = GroupConfig(
        name="chat",
        scaling_group_id="asg-1",
        min_size=1,
        max_size=2,
        metrics_source={"type": "prometheus", "url": "http://p:9090", "max_answer_mib": 8},
    )
    assert source_for(spec, clients=None).client.max_answer_bytes == 8 * 2**20
    plain = GroupConfig.model_validate(
        {
            **spec.model_dump(exclude={"metrics_source"}),
            "metrics_source": {"type": "prometheus", "url": "http://p"},
        }
    )
    assert source_for(plain, clients=None).client.max_answer_bytes == 64 * 2**20


def test_a_too_large_answer_leaves_the_metric_unknown_and_the_tick_goes_on(aliyun_server, prom_api):
    rows = [({"instance_id": f"i-{n}", "pod": "x" * 40}, 1) for n in range(30000)]  # ~2 MB: over 1 MiB
    prom_api.answer = lambda e, f: (200, vector(rows))
    cloud = aliyun_server.cloud
    gid = cloud.create_group_for_tests(name="chat", desired_capacity=1, in_service=1, region_id=REGION)
    clients = make_clients(REGION, cloud.account_id, endpoint=aliyun_server.endpoint, retry=FAST, env=ENV)
    spec = GroupConfig(
        name="chat",
        scaling_group_id=gid,
        min_size=1,
        max_size=2,
        scale_out=[{"metric": "queue_waiting_per_instance", "above": 2, "for": "30s"}],
        isolation={"enabled": False},
        metrics_source={"type": "prometheus", "url": prom_api.url, "max_answer_mib": 1},
    )
    errors: list[CloudError] = []
    g = Observer(clients, [spec], on_error=errors.append).observe(cloud.now()).groups["chat"]
    assert g.ok and g.metrics == {} and g.staleness_s[pm.QUEUE_WAITING] is None
    assert {e.code for e in errors} == {"Prometheus.AnswerTooLarge"}


def test_an_instance_the_freshness_query_leaves_out_is_unknown_not_dated_now(prom_api):
    """Its point used to be dated at the evaluation time: a value of unknown age read as fresh."""
    prom_api.answer = _answer_by_kind(
        [({"instance_id": "i-a"}, 3), ({"instance_id": "i-b"}, 5)],
        [({"instance_id": "i-a"}, EVAL_AT - 2)],
    )
    points = PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ["i-a", "i-b"])
    assert [(p.instance_id, p.value) for p in points] == [("i-a", 3.0)]


@pytest.mark.parametrize("skew_s", [-90.0, 0.0, 90.0])
def test_a_points_age_is_measured_on_prometheus_clock_whatever_its_skew(prom_api, skew_s):
    """The point was dated by Prometheus' clock and aged by the service's: a Prometheus 90 s ahead made
    every point 'in the future' (dropped: every metric unknown), 90 s behind made them all look stale."""
    service_now = 1_800_000_000.0
    prom_now = service_now + skew_s
    prom_api.answer = lambda e, f: (
        200,
        vector([({"instance_id": "i-a"}, prom_now - 4 if "timestamp(" in f["query"] else 7)], at=prom_now),
    )
    src = PrometheusSource(prom_api.url, clock=lambda: service_now)
    [point] = src.read_last(pm.QUEUE_WAITING, ["i-a"])
    assert point.value == 7 and point.timestamp == datetime.fromtimestamp(service_now - 4, UTC)


def test_a_404_says_the_url_may_not_be_prometheus_base_url(prom_api):
    prom_api.answer = lambda e, f: (404, "404 page not found")
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(prom_api.url + "/prom").read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.HTTP404" and "base URL" in info.value.message
    assert prom_api.url + "/prom/api/v1/query" in info.value.message


def test_a_reads_warnings_are_taken_once_by_the_thread_that_read(prom_api):
    answer = _answer_by_kind([({"instance_id": "i-a"}, 1)], [({"instance_id": "i-a"}, EVAL_AT)])
    prom_api.answer = lambda e, f: (200, {**answer(e, f)[1], "warnings": ["PromQL info: not a counter"]})
    src = PrometheusSource(prom_api.url, clock=lambda: EVAL_AT)
    src.read_last(pm.QUEUE_WAITING, ["i-a"])
    elsewhere: list[list[str]] = []
    other = threading.Thread(target=lambda: elsewhere.append(src.take_warnings(pm.QUEUE_WAITING)))
    other.start()
    other.join()
    assert elsewhere == [[]]  # another thread's read is not this one's
    assert src.take_warnings(pm.QUEUE_WAITING) == ["PromQL info: not a counter"]  # once, for both queries
    assert src.take_warnings(pm.QUEUE_WAITING) == []


def test_an_answer_in_a_charset_no_codec_knows_is_read_as_utf8(prom_api):
    answer = _answer_by_kind([({"instance_id": "i-a"}, 2)], [({"instance_id": "i-a"}, EVAL_AT)])
    prom_api.answer = lambda e, f: (*answer(e, f), {"content-type": "application/json; charset=x-bogus"})
    points = PrometheusSource(prom_api.url, clock=lambda: EVAL_AT).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert [p.value for p in points] == [2.0]


def test_a_matrix_where_a_vector_is_expected_names_the_query_in_one_short_line(prom_api):
    """The message carried the whole query, every instance id of the fleet in its regex: a line of tens of
    kilobytes in the log and the tick's errors at every tick."""
    ids = [f"i-2ze{n:017d}" for n in range(1000)]
    prom_api.answer = lambda e, f: (200, matrix([({"instance_id": ids[0]}, [(1.0, 1.0)])]))
    with pytest.raises(InvalidRequest) as info:
        PrometheusSource(prom_api.url).read_last(pm.QUEUE_WAITING, ids)
    assert info.value.code == "Prometheus.BadResultType"
    assert "'matrix'" in info.value.message and "vllm:num_requests_waiting" in info.value.message
    assert len(info.value.message) < 500


def test_an_answer_trickled_past_the_timeout_fails_the_read_naming_the_timeout(prom_api):
    """Each wait for a byte was bounded by timeout_s, not the answer: a server sending a few bytes every
    tenth of a second held the read (and the tick) until it was done. Now the read gives up once timeout_s
    has passed since the query was sent."""
    rows = [({"instance_id": f"i-{n}"}, n) for n in range(40)]  # ~2.6 kB: 13 s at 20 bytes a tenth
    prom_api.answer = lambda e, f: (200, vector(rows))
    prom_api.trickle = (20, 0.1)
    with pytest.raises(NetworkError) as info:
        PrometheusSource(prom_api.url, timeout_s=0.5).read_last(pm.QUEUE_WAITING, ["i-a"])
    assert info.value.code == "Prometheus.Unreachable"
    assert "longer than metrics_source.timeout_s (0.5 s)" in info.value.message
    prom_api.trickle = None
    assert len(PrometheusSource(prom_api.url, timeout_s=0.5).read_last(pm.QUEUE_WAITING, ["i-1"])) == 1
