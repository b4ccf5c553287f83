"""fleet.yaml's per-group ``metrics_source``: validation lines, and the source each group gets."""

from __future__ import annotations

import json
import textwrap

import pytest

from fleet.config import ConfigError, load_config
from fleet.service.logs import config_secrets
from fleet.service.sources import CloudMonitorSource, PrometheusSource, source_for


def _load(tmp_path, source_yaml: str):
    """A two-group fleet.yaml whose first group has ``source_yaml`` (a metrics_source block)."""
    source = textwrap.indent(textwrap.dedent(source_yaml).strip(), " " * 4)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "region: cn-chengdu\n"
        'account_id: "1234567890"\n'
        "groups:\n"
        "  - name: chat\n"
        "    scaling_group_id: asg-1\n"
        "    min_size: 1\n"
        "    max_size: 4\n"
        f"{source}\n"
        "  - name: batch\n"
        "    scaling_group_id: asg-2\n"
        "    min_size: 1\n"
        "    max_size: 4\n"
    )
    return load_config(path, env={})


def _problems(tmp_path, source_yaml: str) -> str:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, source_yaml)
    return "\n".join(info.value.problems)


def test_prometheus_source_is_built_for_its_group_and_cloudmonitor_for_the_rest(tmp_path):
    cfg = _load(
        tmp_path,
        """
        metrics_source:
          type: prometheus
          url: http://127.0.0.1:9090
          labels: {cluster: prod}
          instance_label: ecs_id
        """,
    )
    chat = source_for(cfg.group("chat"), clients=type("Clients", (), {"cms": None})())
    batch = source_for(cfg.group("batch"), clients=type("Clients", (), {"cms": None})())
    assert isinstance(chat, PrometheusSource) and isinstance(batch, CloudMonitorSource)
    assert chat.instance_label == "ecs_id" and chat.labels == {"cluster": "prod"}
    assert chat.client.url == "http://127.0.0.1:9090"


def test_prometheus_without_url_names_the_field(tmp_path):
    problems = _problems(tmp_path, "metrics_source: {type: prometheus}\n")
    assert "groups[0].metrics_source" in problems and "needs url" in problems


def test_a_bad_label_name_names_the_field(tmp_path):
    problems = _problems(
        tmp_path, "metrics_source: {type: prometheus, url: 'http://p:9090', labels: {bad-name: x}}\n"
    )
    assert "groups[0].metrics_source" in problems and "'bad-name'" in problems


def test_labels_may_not_match_on_the_instance_label(tmp_path):
    problems = _problems(
        tmp_path, "metrics_source: {type: prometheus, url: 'http://p:9090', labels: {instance_id: i-1}}\n"
    )
    assert "instance_label" in problems


def test_an_unknown_source_type_is_refused(tmp_path):
    problems = _problems(tmp_path, "metrics_source: {type: influxdb, url: 'http://p:8086'}\n")
    assert "groups[0].metrics_source.type" in problems


def test_a_prometheus_url_without_a_host_is_refused(tmp_path):
    problems = _problems(tmp_path, 'metrics_source: {type: prometheus, url: "http://"}\n')
    assert "groups[0].metrics_source: url must be an http:// or https:// URL with a host" in problems


@pytest.mark.parametrize("extra", ['url: "http://prom:9090"', "labels: {cluster: prod}"])
def test_prometheus_settings_on_a_cloudmonitor_source_are_refused_not_ignored(tmp_path, extra):
    problems = _problems(tmp_path, f"metrics_source: {{{extra}}}\n")
    assert "groups[0].metrics_source: url and labels apply to type: prometheus only" in problems


def test_bearer_token_env_must_name_an_environment_variable(tmp_path):
    problems = _problems(
        tmp_path, "metrics_source: {type: prometheus, url: 'http://p:9090', bearer_token_env: 'my token'}\n"
    )
    assert "groups[0].metrics_source: bearer_token_env 'my token' is not an environment variable" in problems


def test_bearer_token_env_on_a_cloudmonitor_source_is_refused(tmp_path):
    problems = _problems(tmp_path, "metrics_source: {bearer_token_env: PROM_TOKEN}\n")
    assert "bearer_token_env applies to type: prometheus only" in problems


def test_fleet_serve_refuses_an_unset_bearer_token_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("FLEET_TEST_PROM_TOKEN", raising=False)
    cfg = _load(
        tmp_path,
        "metrics_source: {type: prometheus, url: 'http://p:9090', bearer_token_env: FLEET_TEST_PROM_TOKEN}\n",
    )
    assert cfg.service_problems() == [
        "groups[chat].metrics_source.bearer_token_env: environment variable FLEET_TEST_PROM_TOKEN is not set "
        "or empty"
    ]
    monkeypatch.setenv("FLEET_TEST_PROM_TOKEN", "tok-123")
    assert cfg.service_problems() == []


def test_the_prometheus_password_and_token_are_redacted_from_log_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_TEST_PROM_TOKEN", "tok-secret-123")
    cfg = _load(
        tmp_path,
        "metrics_source: {type: prometheus, url: 'http://fleet:pw-secret-9@p:9090', "
        "bearer_token_env: FLEET_TEST_PROM_TOKEN}\n",
    )
    secrets = config_secrets(cfg, None)
    assert "pw-secret-9" in secrets and "tok-secret-123" in secrets


def test_the_prometheus_timeout_is_configurable_and_defaults_to_ten_seconds(tmp_path):
    cfg = _load(tmp_path, "metrics_source: {type: prometheus, url: 'http://p:9090', timeout_s: 2.5}\n")
    assert source_for(cfg.group("chat"), clients=None).client.timeout_s == 2.5
    cfg = _load(tmp_path, "metrics_source: {type: prometheus, url: 'http://p:9090'}\n")
    assert source_for(cfg.group("chat"), clients=None).client.timeout_s == 10.0


@pytest.mark.parametrize("value", ["0", "-1", "600", "'soon'"])
def test_a_prometheus_timeout_out_of_range_names_the_field(tmp_path, value):
    problems = _problems(
        tmp_path, f"metrics_source: {{type: prometheus, url: 'http://p:9090', timeout_s: {value}}}\n"
    )
    assert "groups[0].metrics_source.timeout_s" in problems


def test_a_timeout_on_a_cloudmonitor_source_is_refused_not_ignored(tmp_path):
    problems = _problems(tmp_path, "metrics_source: {timeout_s: 5}\n")
    assert "timeout_s applies to type: prometheus only" in problems


def test_a_config_read_back_from_its_own_dump_is_still_valid(tmp_path):
    """``model_validate(config.model_dump())`` (the simulator's variants, tests) carries the sources' defaults
    as set values: a cloudmonitor source's default timeout and answer limit are not refused as set."""
    from fleet.config import FleetConfig

    cfg = _load(tmp_path, "")
    again = FleetConfig.model_validate(cfg.model_dump())
    assert again.group("chat").metrics_source == cfg.group("chat").metrics_source


def test_the_config_schema_documents_the_prometheus_timeout():
    from fleet.config import config_json_schema

    text = json.dumps(config_json_schema())
    assert '"timeout_s"' in text and "Prometheus" in text


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://p:9090/api/v1", "without /api/v1"),
        ("http://p:9090/prometheus/api/v1/", "without /api/v1"),
        ("http://p:9090/?tenant=a", "no query string"),
        ("http://p:9090/#x", "no query string"),
    ],
)
def test_a_prometheus_url_that_is_not_its_base_url_is_refused(tmp_path, url, why):
    """The API paths are added to the url: these became .../api/v1/api/v1/query (a 404 read as 'not a
    Prometheus API answer') or put the path inside the query string."""
    problems = _problems(tmp_path, f"metrics_source: {{type: prometheus, url: '{url}'}}\n")
    assert "groups[0].metrics_source" in problems and why in problems


def test_a_prometheus_url_with_a_path_prefix_is_kept(tmp_path):
    cfg = _load(tmp_path, "metrics_source: {type: prometheus, url: 'https://proxy.internal/prometheus/'}\n")
    assert source_for(cfg.group("chat"), clients=None).client.url == "https://proxy.internal/prometheus"
