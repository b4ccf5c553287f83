"""make_clients: endpoint override, credential sources, and that no secret ever reaches logs or errors."""

from __future__ import annotations

import logging
import re
import traceback
from datetime import UTC, datetime

import pytest
import requests
import responses

from fleet.cloud import CloudError, CustomMetric, RetryPolicy, make_clients
from fleet.cloud.clients import parse_endpoint

from .conftest import ACCOUNT, REGION, Sleeps, Stub, error

SECRET = "SeCrEt-canary-9f3a7c0d"
TOKEN = "StsToken-canary-51b2e8"
GROUPS = {"ScalingGroups": [], "TotalCount": 0}


@pytest.mark.parametrize(
    ("value", "host", "protocol"),
    [
        ("127.0.0.1:8080", "127.0.0.1:8080", "http"),
        ("http://127.0.0.1:8080/", "127.0.0.1:8080", "http"),
        ("https://ess.example.com", "ess.example.com", "https"),
    ],
)
def test_parse_endpoint(value, host, protocol):
    ep = parse_endpoint(value)
    assert (ep.host, ep.protocol) == (host, protocol)


def test_parse_endpoint_refuses_other_schemes():
    with pytest.raises(ValueError, match="FLEET_ALIYUN_ENDPOINT"):
        parse_endpoint("ftp://x:1")


@pytest.mark.parametrize("value", ["127.0.0.1:8080\n8080", "127.0.0.1:80a", "127.0.0.1:8080/path", ":8080"])
def test_parse_endpoint_refuses_what_is_not_host_port(value):
    with pytest.raises(ValueError, match="expected host:port"):
        parse_endpoint(value)


def test_serve_with_a_malformed_endpoint_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from fleet.cli import main

    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "region: cn-hangzhou\naccount_id: '1'\ngroups:\n"
        "  - {name: g, scaling_group_name: g, min_size: 0, max_size: 2}\n"
    )
    monkeypatch.setenv("FLEET_ALIYUN_ENDPOINT", "127.0.0.1:80 80")
    code = main(["serve", "--config", str(cfg), "--once", "--database", f"sqlite:///{tmp_path / 'f.db'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert "FLEET_ALIYUN_ENDPOINT" in err and "Traceback" not in err


def _local_stub():
    rsps = responses.RequestsMock(assert_all_requests_are_fired=False)
    seen: list[tuple[str, str, str]] = []

    def answer(request):
        seen.append(
            (request.url.split("/?")[0], request.headers["x-acs-action"], request.headers["Authorization"])
        )
        return (
            200,
            {},
            '{"RequestId": "R", "ScalingGroups": [], "TotalCount": 0, "Code": "200", "Datapoints": "[]"}',
        )

    rsps.add_callback(responses.POST, re.compile(r"http://127\.0\.0\.1:18080/.*"), callback=answer)
    return rsps, seen


def test_endpoint_env_points_all_three_clients_at_one_plain_http_host(tmp_path):
    env = {"FLEET_ALIYUN_ENDPOINT": "127.0.0.1:18080", "HOME": str(tmp_path)}
    rsps, seen = _local_stub()
    with rsps:
        clients = make_clients(REGION, ACCOUNT, retry=RetryPolicy(attempts=1), env=env)
        clients.ess.describe_scaling_groups()
        clients.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"])
        clients.ecs.describe_instances([])  # no ids: no call
        clients.ecs.reboot_instance("i-1")
    assert [(url, action) for url, action, _ in seen] == [
        ("http://127.0.0.1:18080", "DescribeScalingGroups"),
        ("http://127.0.0.1:18080", "DescribeMetricLast"),
        ("http://127.0.0.1:18080", "RebootInstance"),
    ]


def test_local_endpoint_without_credentials_signs_with_dummy_keys(tmp_path):
    rsps, seen = _local_stub()
    with rsps:
        clients = make_clients(REGION, ACCOUNT, endpoint="127.0.0.1:18080", env={"HOME": str(tmp_path)})
        clients.ess.describe_scaling_groups()
    assert "Credential=fleet-local-fake" in seen[0][2]


def test_environment_access_key_is_used(tmp_path):
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-from-env",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "HOME": str(tmp_path),
    }
    rsps, seen = _local_stub()
    with rsps:
        make_clients(REGION, ACCOUNT, endpoint="127.0.0.1:18080", env=env).ess.describe_scaling_groups()
    assert "Credential=LTAI-from-env" in seen[0][2]


def test_explicit_credential_wins_over_environment(tmp_path):
    from alibabacloud_credentials import models as credential_models
    from alibabacloud_credentials.client import Client as CredentialClient

    given = CredentialClient(
        credential_models.Config(type="access_key", access_key_id="LTAI-given", access_key_secret=SECRET)
    )
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-env",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "x",
        "HOME": str(tmp_path),
    }
    rsps, seen = _local_stub()
    with rsps:
        make_clients(
            REGION, ACCOUNT, endpoint="127.0.0.1:18080", credential=given, env=env
        ).ess.describe_scaling_groups()
    assert "Credential=LTAI-given" in seen[0][2]


def test_no_secret_reaches_logs_reprs_or_errors(stub: Stub, tmp_path, caplog):
    """Calls that succeed, retry and fail, with DEBUG logging everywhere: the secret and token never show."""
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-canary-id",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "ALIBABA_CLOUD_SECURITY_TOKEN": TOKEN,
        "HOME": str(tmp_path),
    }
    policy = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.002, sleep=Sleeps())
    caplog.set_level(logging.DEBUG)  # the root logger: ours, the SDK's, urllib3's
    clients = make_clients(REGION, ACCOUNT, retry=policy, env=env)
    texts = [
        repr(clients),
        str(clients),
        repr(clients.ess),
        repr(clients.cms),
        repr(clients.ecs),
        repr(policy),
    ]
    failures: list[BaseException] = []

    stub.sequence("DescribeScalingGroups", error(400, "Throttling.User"), GROUPS)  # retried, then succeeds
    clients.ess.describe_scaling_groups()
    stub.on("DescribeMetricLast", error(400, "Throttling.User", **{"x-acs-retry-after": "1"}))  # gives up
    stub.on("PutCustomMetric", error(403, "SignatureDoesNotMatch", "Specified signature is not matched"))
    stub.on("DescribeInstances", requests.ConnectionError("connection reset by peer"))
    stub.on("ScaleWithAdjustment", error(503, "ServiceUnavailable"))
    for attempt in (
        lambda: clients.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"]),
        lambda: clients.cms.put_custom_metrics(
            [CustomMetric("m", {"instanceId": "i-1"}, 1.0, datetime.now(UTC))]
        ),
        lambda: clients.ecs.describe_instances(["i-1"]),
        lambda: clients.ess.scale_to("asg-1", 2, client_token="t"),
    ):
        with pytest.raises(CloudError) as info:
            attempt()
        failures.append(info.value)

    # The credentials really were in play: the token went over the wire (as it must), signed by the key id.
    assert stub.calls[0].headers["x-acs-security-token"] == TOKEN
    assert "Credential=LTAI-canary-id" in stub.calls[0].headers["Authorization"]
    assert any(r.levelno == logging.WARNING for r in caplog.records)  # retries were logged

    for err in failures:
        texts += [str(err), repr(err), "".join(traceback.format_exception(err))]
    texts.append(caplog.text)
    texts += [r.getMessage() for r in caplog.records]
    for text in texts:
        assert SECRET not in text
        assert TOKEN not in text
