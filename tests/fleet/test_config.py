"""fleet.config: fleet.yaml + FLEET_* environment into one FleetConfig, every problem reported at once."""

import json
from datetime import time
from pathlib import Path

import pytest

from fleet.config import ConfigError, FleetConfig, config_json_schema, load_config
from policies import PolicySpec, Snapshot, decide
from policies.spec import MIN_BATCHED_TOKENS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fleet.yaml"

MINIMAL = """
region: cn-chengdu
groups:
  - {name: g, min_size: 1, max_size: 4}
"""


def write(tmp_path, text, name="fleet.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_expresses_the_acceptance_policy():
    cfg = load_config(EXAMPLE, env={})
    (group,) = cfg.groups
    biz = next(s for s in group.schedules if s.name == "business-hours")
    assert (biz.timezone, biz.weekdays, biz.start, biz.end, biz.floor) == (
        "Asia/Shanghai",
        (0, 1, 2, 3, 4),
        time(9),
        time(18),
        6,
    )
    nights = next(s for s in group.schedules if s.name == "nights")
    assert nights.floor == 2 and nights.start == time(18) and nights.end == time(9)
    queue = next(r for r in group.scale_out if r.metric == "queue_waiting_per_instance")
    assert (queue.above, queue.for_s) == (2, 30)
    assert any(r.metric == "ttft_p99_ms" and r.above == 800 for r in group.scale_out)
    hot = next(r for r in group.isolation.rules if r.metric == "gpu_temperature_c")
    assert (hot.above, hot.for_s) == (85, 120)
    assert (group.isolation.respond_within_s, group.isolation.isolate_within_s) == (900, 14400)


def test_defaults_of_the_service_keys():
    cfg = FleetConfig.model_validate(
        {"region": "cn-chengdu", "groups": [{"name": "g", "min_size": 1, "max_size": 2}]}
    )
    assert cfg.tick_interval_s == 15
    assert cfg.api.host == "127.0.0.1"
    assert cfg.groups[0].metrics_source.type == "cloudmonitor"
    assert cfg.groups[0].warm_floor == 2


def test_environment_overrides_the_file(tmp_path):
    path = write(tmp_path, MINIMAL + "tick_interval_s: 15\n")
    cfg = load_config(
        path,
        env={"FLEET_TICK_INTERVAL_S": "5", "FLEET_DATABASE_URL": "sqlite:///x.db", "FLEET_API__PORT": "9000"},
    )
    assert cfg.tick_interval_s == 5 and cfg.database_url == "sqlite:///x.db" and cfg.api.port == 9000


def test_api_token_from_the_environment_short_or_nested(tmp_path):
    path = write(tmp_path, MINIMAL)
    assert load_config(path, env={"FLEET_API_TOKEN": "token-1a"}).api.token.get_secret_value() == "token-1a"
    assert load_config(path, env={"FLEET_API__TOKEN": "token-2b"}).api.token.get_secret_value() == "token-2b"


def test_process_environment_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_REGION", "cn-beijing")
    assert load_config(write(tmp_path, MINIMAL)).region == "cn-beijing"


def test_given_environment_replaces_the_process_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TICK_INTERVAL_S", "not-a-duration")
    assert load_config(write(tmp_path, MINIMAL), env={}).tick_interval_s == 15


def test_unrelated_fleet_variables_are_ignored(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL), env={"FLEET_ALIYUN_ENDPOINT": "127.0.0.1:9", "FLEET_X": "1"})
    assert cfg.region == "cn-chengdu"


def test_bad_environment_value_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="tick_interval_s"):
        load_config(write(tmp_path, MINIMAL), env={"FLEET_TICK_INTERVAL_S": "soon"})


@pytest.mark.parametrize("value", ["2d", "1e12", "inf"])
def test_a_tick_longer_than_a_day_is_refused(tmp_path, value):
    # `fleet serve` hands the interval to APScheduler, whose trigger overflows on inf and huge values.
    with pytest.raises(ConfigError, match="tick_interval_s"):
        load_config(write(tmp_path, MINIMAL + f"tick_interval_s: {value}\n"), env={})


BAD = """
region: cn-chengdu
groups:
  - name: a
    min_size: 1
    max_sise: 20
    max_size: 4
    schedules:
      - {name: x, days: mon-fry, start: "09:00", end: "18:00", min: 2}
    scale_out:
      - {metric: queue_wait, above: 2, for: 30s}
notifications:
  - {type: slack, url: "https://example.invalid/hook", secret: hunter2}
"""


def test_every_problem_is_listed_with_file_field_and_reason(tmp_path):
    path = write(tmp_path, BAD)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    lines = err.value.problems
    assert len(lines) == 4
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert any("groups[0].max_sise: unknown key (did you mean 'max_size'?)" in line for line in lines)
    assert any("groups[0].schedules[0].days:" in line and "'fri'" in line for line in lines)
    assert any(
        "groups[0].scale_out[0].metric:" in line and "queue_waiting_per_instance" in line for line in lines
    )
    assert any("notifications[0].type:" in line for line in lines)
    assert str(err.value) == "\n".join(lines)


def test_secrets_never_show(tmp_path):
    path = write(tmp_path, BAD)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={"FLEET_API__TOKEN": "tok-12345"})
    assert "hunter2" not in str(err.value)
    cfg = load_config(
        write(
            tmp_path,
            MINIMAL + "notifications:\n  - {type: feishu, url: 'https://x.invalid', secret: s3}\n",
            "ok.yaml",
        ),
        env={"FLEET_API_TOKEN": "tok-12345"},
    )
    shown = repr(cfg) + str(cfg) + cfg.model_dump_json()
    assert "tok-12345" not in shown and "s3" not in shown.replace("https", "")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://", "names no host"),
        ("https://?access_token=SECRETTOKEN", "names no host"),
        ("https:// oapi.dingtalk.com/robot/send?access_token=SECRETTOKEN", "spaces or control characters"),
        ("https://oapi.dingtalk.com:99999/robot/send?access_token=SECRETTOKEN", "is not a valid URL"),
        ("http://[::1/hook?access_token=SECRETTOKEN", "is not a valid URL"),
    ],
)
def test_a_notification_url_that_names_no_reachable_host_is_refused(tmp_path, url, problem):
    """Accepted before: the service started, and every notification failed at delivery (InvalidURL),
    logged only, so an incident's notice never went out and nothing acknowledged it."""
    text = MINIMAL + f"notifications:\n  - {{type: dingtalk, url: '{url}'}}\n"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text), env={})
    [line] = err.value.problems
    assert "notifications[0].url:" in line and problem in line
    assert "SECRETTOKEN" not in line


@pytest.mark.parametrize("kind", ["webhook", "wecom"])
def test_a_secret_on_a_channel_that_signs_nothing_is_refused(tmp_path, kind):
    """Accepted before and silently ignored: the operator believed the messages signed."""
    channel = f"{{type: {kind}, url: 'https://hooks.invalid/x', secret: S3CRETVALUE}}"
    text = MINIMAL + f"notifications:\n  - {channel}\n"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text), env={})
    [line] = err.value.problems
    assert f"notifications[0]: secret: a {kind} channel sends no signature" in line
    assert "S3CRETVALUE" not in line


def test_cross_field_problems_are_reported(tmp_path):
    path = write(tmp_path, "region: r\ngroups:\n  - {name: a, min_size: 9, max_size: 3}\n")
    with pytest.raises(ConfigError, match=r"groups\[0\]: min_size \(9\) is above max_size \(3\)"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("region", "where"), [("region: cn-chengdu\n", ""), ("region: r\n", "    region: cn-chengdu\n")]
)
def test_a_zone_of_another_region_is_refused(tmp_path, region, where):
    """The zone only labels the ladder's rungs (the vSwitch is what ESS is given), so a zone copied from
    another region used to pass and be shown in every stock-out record as if the group were there."""
    zones = "    zones: [{zone: cn-chengdu-a, vswitch_id: vsw-a}, {zone: cn-hangzhou-h, vswitch_id: vsw-h}]\n"
    text = region + "groups:\n  - name: a\n    min_size: 1\n    max_size: 3\n" + where + zones
    with pytest.raises(
        ConfigError, match=r"groups\[a\]\.zones: cn-hangzhou-h not in the group's region cn-chengdu"
    ):
        load_config(write(tmp_path, text), env={})
    load_config(write(tmp_path, text.replace("cn-hangzhou-h", "cn-chengdu-b")), env={})


def test_duplicate_group_names_are_rejected(tmp_path):
    group = "  - {name: a, min_size: 1, max_size: 3}\n"
    text = "region: r\ngroups:\n" + group + group
    with pytest.raises(ConfigError, match="unique"):
        load_config(write(tmp_path, text), env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region: [\n", "line 2"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("", "region: required"),
    ],
)
def test_unreadable_files_are_one_clear_line(tmp_path, text, expected):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text), env={})
    assert expected in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml", env={})


def test_prometheus_source_needs_a_url(tmp_path):
    text = "region: r\ngroups:\n  - {name: a, min_size: 1, max_size: 3, metrics_source: {type: prometheus}}\n"
    with pytest.raises(
        ConfigError, match=r"groups\[0\].metrics_source: a prometheus metrics_source needs url"
    ):
        load_config(write(tmp_path, text), env={})


def test_no_notification_channel_is_a_warning_not_an_error(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL), env={})
    assert any("no notification channel" in w for w in cfg.warnings())
    assert not any("notification" in w for w in load_config(EXAMPLE, env={}).warnings())


@pytest.mark.parametrize(
    ("mix", "warned"),
    [
        ("{on_demand_base: 4, spot_percentage_above_base: 70}", "never buys spot"),
        ("{on_demand_base: 2, spot_price_limit: 9.5}", "the limit is never used"),
        ("{on_demand_base: 3, spot_percentage_above_base: 70, spot_price_limit: 9.5}", None),
    ],
)
def test_a_capacity_mix_part_that_can_never_apply_is_warned_of(tmp_path, mix, warned):
    """Both passed silently: a base at max_size leaves no instance for spot; a price limit without spot."""
    text = MINIMAL.replace("max_size: 4}", f"max_size: 4, capacity_mix: {mix}}}")
    warnings = [w for w in load_config(write(tmp_path, text), env={}).warnings() if "capacity_mix" in w]
    assert [warned in w for w in warnings] == ([True] if warned else [])


@pytest.mark.parametrize(("above", "warned"), [(90, True), (92.5, True), (93, False), (95, False)])
def test_a_gpu_memory_rule_that_healthy_vllm_engines_breach_is_warned(tmp_path, above, warned):
    text = MINIMAL.replace(
        "{name: g, min_size: 1, max_size: 4}",
        "{name: g, min_size: 1, max_size: 4, isolation: {rules: "
        f"[{{name: mem, metric: gpu_mem_used_pct, above: {above}, for: 5m, action: reboot}}]}}}}",
    )
    warnings = load_config(write(tmp_path, text), env={}).warnings()
    assert any("'mem': gpu_mem_used_pct above" in w and "healthy vLLM" in w for w in warnings) is warned


def test_the_default_gpu_memory_rule_sits_above_what_a_healthy_engine_reads(tmp_path):
    from fleet.config import GPU_MEM_AT_REST_PCT
    from policies.spec import default_isolation_rules

    (rule,) = [r for r in default_isolation_rules() if r.metric == "gpu_mem_used_pct"]
    assert rule.above is not None and rule.above > GPU_MEM_AT_REST_PCT
    assert not any("healthy vLLM" in w for w in load_config(write(tmp_path, MINIMAL), env={}).warnings())


def test_more_scheduled_tasks_than_a_regions_default_quota_is_warned(tmp_path):
    def group(name, region=""):
        where = f", region: {region}" if region else ""
        return (
            f"  - {{name: {name}, min_size: 1, max_size: 4{where}, "
            "predictive: {mode: on, model: Qwen2.5-7B, instance_type: ecs.gn7i-c8g1.2xlarge}}\n"
        )

    def warned(*groups):
        text = "region: cn-chengdu\ngroups:\n" + "".join(groups)
        return [w for w in load_config(write(tmp_path, text), env={}).warnings() if "scheduled tasks" in w]

    assert not warned(group("a"), group("b"))  # 48 learned floors
    [w] = warned(group("a"), group("b"), group("c"))  # 72 in one region
    assert w.startswith("region cn-chengdu: the groups mirror 72 ESS scheduled tasks") and "70" in w
    assert not warned(group("a"), group("b"), group("c", region="cn-hangzhou"))  # 48 and 24


def test_json_schema_documents_the_file():
    schema = config_json_schema()
    assert {"region", "groups", "notifications", "api", "lease"} <= set(schema["properties"])
    json.dumps(schema)


def test_the_config_is_a_policy_spec_for_decide():
    cfg = load_config(EXAMPLE, env={})
    snap = Snapshot.model_validate_json((ROOT / "examples" / "snapshots" / "queue-spike.json").read_text())
    plan = decide(snap, cfg, None, snap.taken_at)
    assert plan.group("chat-7b").serving_target > 6
    assert isinstance(cfg.policy(), PolicySpec)


def test_urls_that_may_hold_credentials_stay_out_of_reprs(tmp_path):
    text = (
        MINIMAL
        + "notifications:\n  - {type: dingtalk, url: 'https://oapi.invalid/send?access_token=abc123'}\n"
    )
    cfg = load_config(write(tmp_path, text), env={"FLEET_DATABASE_URL": "postgresql://u:pw123@db/fleet"})
    assert cfg.database_url == "postgresql://u:pw123@db/fleet"
    assert "pw123" not in repr(cfg) and "abc123" not in repr(cfg)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path):
    binary = tmp_path / "fleet.yaml"
    binary.write_bytes(b"region: r\n\xff\xfe")
    with pytest.raises(ConfigError) as info:
        load_config(binary, env={})
    assert info.value.problems == [f"{binary}: not UTF-8 text (byte 10)"]


def test_a_mapping_where_a_list_belongs_says_list(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "region: r\ngroups:\n  - {name: a, min_size: 1, max_size: 3, scale_out: {metric: ttft_p99_ms}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    expected = f"{path}: groups[0].scale_out: must be a list (- item lines or [a, b]), got dict"
    assert info.value.problems == [expected]


@pytest.mark.parametrize(
    ("group", "named"),
    [
        # YAML reads yes as true, and pydantic took true as 1: a floor of one nobody wrote
        ("{name: g, min_size: yes, max_size: 4}", r"groups\[0\]\.min_size: true \(a YAML yes/no/on/off\)"),
        ("{name: g, min_size: 1, max_size: 4, cold_start_s: on}", r"cold_start_s: true"),
        # every sample stale between two 15 s points: nothing would ever scale
        (
            "{name: g, min_size: 1, max_size: 4, stabilization: {stale_after: 0s}}",
            r"stale_after: .*greater than 0",
        ),
        (
            "{name: g, min_size: 1, max_size: 4,"
            " isolation: {rules: [{metric: gpu_mem_used_pct, above: 195}]}}",
            r"above 195: gpu_mem_used_pct is a share in percent .* never fires",
        ),
        (
            "{name: g, min_size: 1, max_size: 4,"
            " scale_in: [{metric: kv_cache_usage_pct, below: 150, for: 5m}]}",
            r"below 150: kv_cache_usage_pct .* always holds",
        ),
    ],
)
def test_a_value_no_config_means_is_refused_naming_the_field(tmp_path, group, named):
    path = write(tmp_path, f"region: r\ngroups:\n  - {group}\n")
    with pytest.raises(ConfigError, match=named):
        load_config(path, env={})


def test_yaml_booleans_still_set_the_fields_that_are_booleans_or_modes(tmp_path):
    group = (
        "{name: g, min_size: 1, max_size: 4, predictive: {mode: on, capacity_rps: 2, learned_floors: no},"
        " scale_out: [{metric: gpu_util_avg, above: 99}]}"
    )
    cfg = load_config(write(tmp_path, f"region: r\ngroups:\n  - {group}\n"), env={})
    pred = cfg.groups[0].predictive
    assert pred.mode == "on" and pred.learned_floors is False


def test_a_stale_after_shorter_than_a_metric_period_is_warned(tmp_path):
    group = "{name: g, min_size: 1, max_size: 4, stabilization: {stale_after: 5s}}"
    cfg = load_config(write(tmp_path, f"region: r\ngroups:\n  - {group}\n"), env={})
    assert any("stale_after 5s is under the 15s period" in w for w in cfg.warnings())
    assert not any("stale_after" in w for w in load_config(write(tmp_path, MINIMAL), env={}).warnings())


def test_json_schema_knows_the_predictive_vllm_settings_and_their_bounds():
    props = config_json_schema()["$defs"]["Predictive"]["properties"]

    def bound(name: str, key: str) -> float:
        return next(v[key] for v in props[name]["anyOf"] if key in v)

    assert bound("max_num_seqs", "minimum") == 1
    assert bound("max_num_batched_tokens", "minimum") == MIN_BATCHED_TOKENS
    assert bound("gpu_memory_utilization", "exclusiveMinimum") == 0
    assert bound("gpu_memory_utilization", "maximum") == 1
    assert all(props[name]["description"] for name in ("max_num_seqs", "max_num_batched_tokens"))
