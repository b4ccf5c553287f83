"""Several regions and accounts in one fleet.yaml: clients and observation per (account, region), each
account's own custom-metric namespace, and `fleet validate` refusing a profile the credentials lack."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import responses

from fleet.cli import main
from fleet.cloud.clients import make_clients
from fleet.commands.serve import scoped_clients
from fleet.config import load_config
from fleet.service.app import build_service
from fleet.testing import mock_aliyun

ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}


def _credentials(tmp_path, monkeypatch, *profiles: str) -> None:
    home = tmp_path / "home"
    (home / ".alibabacloud").mkdir(parents=True)
    body = "".join(
        f"[{p}]\ntype = access_key\naccess_key_id = id-{p}\naccess_key_secret = secret-{p}\n"
        for p in profiles
    )
    (home / ".alibabacloud" / "credentials.ini").write_text(body)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ALIBABA_CLOUD_CREDENTIALS_FILE", raising=False)


def _yaml(tmp_path, chengdu: str, beijing: str, account_id: str) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        region: cn-chengdu
        account_id: "{account_id}"
        accounts:
          team-b: {{account_id: "{account_id}"}}
        groups:
          - name: chengdu
            scaling_group_id: {chengdu}
            min_size: 1
            max_size: 5
            scale_out: [{{metric: queue_waiting_per_instance, above: 2, for: 30s}}]
            isolation: {{enabled: false}}
          - name: beijing
            region: cn-beijing
            account: team-b
            scaling_group_id: {beijing}
            min_size: 1
            max_size: 5
            scale_out: [{{metric: queue_waiting_per_instance, above: 2, for: 30s}}]
            isolation: {{enabled: false}}
        """)
    )
    return str(path)


def test_validate_refuses_an_unknown_profile_in_one_line(tmp_path, monkeypatch, capsys):
    _credentials(tmp_path, monkeypatch, "someone-else")
    path = _yaml(tmp_path, "asg-1", "asg-2", "123")
    assert main(["validate", "-c", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "groups[beijing].account" in err and "team-b" in err


def test_validate_accepts_a_known_profile(tmp_path, monkeypatch, capsys):
    _credentials(tmp_path, monkeypatch, "team-b")
    path = _yaml(tmp_path, "asg-1", "asg-2", "123")
    assert main(["validate", "-c", path]) == 0


def test_an_account_not_under_accounts_is_a_config_error(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "region: cn-chengdu\ngroups:\n  - {name: a, scaling_group_id: asg-1, min_size: 1, max_size: 2, "
        "account: nobody}\n"
    )
    assert main(["validate", "-c", str(path)]) == 2
    assert "not under accounts" in capsys.readouterr().err


@contextlib.contextmanager
def _two_regions(tmp_path, monkeypatch) -> Iterator[tuple[Any, Any, Any, Any, str]]:
    """A Chengdu group and a Beijing one (profile team-b) in the fake, and one service over both:
    yields (cloud, service, default clients, clients_for, the Beijing group's id)."""
    _credentials(tmp_path, monkeypatch, "team-b")
    with mock_aliyun() as cloud:
        chengdu = cloud.create_group_for_tests(
            name="chengdu", min_size=1, max_size=5, desired_capacity=1, in_service=1, region_id="cn-chengdu"
        )
        beijing = cloud.create_group_for_tests(
            name="beijing", min_size=1, max_size=5, desired_capacity=1, in_service=1, region_id="cn-beijing"
        )
        cfg = load_config(_yaml(tmp_path, chengdu, beijing, cloud.account_id), env={})
        default = make_clients("cn-chengdu", cloud.account_id, env=ENV)
        clients_for = scoped_clients(cfg, default)
        svc = build_service(
            cfg,
            default,
            database_url=f"sqlite:///{tmp_path / 'f.db'}",
            clock=cloud.now,
            clients_for=clients_for,
        )
        try:
            yield cloud, svc, default, clients_for, beijing
        finally:
            svc.close(release_lease=False)


def test_two_regions_are_observed_and_scaled_through_their_own_clients(tmp_path, monkeypatch):
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, default, clients_for, beijing):
        obs = svc.observer.observe(cloud.now())
        assert obs.groups["chengdu"].ok and obs.groups["beijing"].ok
        assert obs.groups["beijing"].group.group_id == beijing
        # the Beijing group is read with its own region and the team-b profile's keys
        scoped = clients_for(("team-b", "cn-beijing"))
        assert scoped is not default and "cn-beijing" in repr(scoped.ess)
        assert svc.actuator_for(("team-b", "cn-beijing")).clients is scoped
        assert scoped.cms.custom_namespace == f"acs_customMetric_{cloud.account_id}"


def test_capacity_fallbacks_drains_and_reconciles_write_through_the_groups_own_region(tmp_path, monkeypatch):
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, default, clients_for, _beijing):
        beijing_scope = ("team-b", "cn-beijing")
        scoped = clients_for(beijing_scope)
        managers = svc.capacity_managers
        assert set(managers) == {beijing_scope, (None, None)}
        assert managers[beijing_scope].ess is scoped.ess
        assert managers[(None, None)].ess is default.ess
        assert svc.drainer_for(beijing_scope).clients is scoped
        assert svc.drainer_for((None, None)).clients is default
        result = svc.tick(cloud.now())
        assert result.ok, result.errors


def _cfg_for_team_b(tmp_path) -> Any:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        'region: cn-chengdu\naccount_id: "1"\naccounts:\n  team-b: {account_id: "2"}\ngroups:\n'
        "  - {name: b, region: cn-beijing, account: team-b, scaling_group_id: asg-1,"
        " min_size: 1, max_size: 2}\n"
    )
    return load_config(str(path), env={})


def _signing_key(clients: Any) -> str:
    return clients.ess._client._credential.get_credential().access_key_id


def test_an_aliyun_cli_profile_signs_its_accounts_calls_not_the_default_keys(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".aliyun").mkdir(parents=True)
    profile = {"name": "team-b", "mode": "AK", "access_key_id": "id-team-b", "access_key_secret": "s-b"}
    (home / ".aliyun" / "config.json").write_text(json.dumps({"current": "team-b", "profiles": [profile]}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ALIBABA_CLOUD_CREDENTIALS_FILE", raising=False)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "id-default-account")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "s-default")
    scoped = scoped_clients(_cfg_for_team_b(tmp_path), None)(("team-b", "cn-beijing"))
    assert _signing_key(scoped) == "id-team-b"


def test_a_ram_role_profile_assumes_its_role_for_its_account(tmp_path, monkeypatch):
    _credentials(tmp_path, monkeypatch)  # HOME with an empty credentials.ini
    ini = tmp_path / "home" / ".alibabacloud" / "credentials.ini"
    ini.write_text(
        "[team-b]\ntype = ram_role_arn\naccess_key_id = id-base\naccess_key_secret = s-base\n"
        "role_arn = acs:ram::9876543210:role/fleet\nrole_session_name = fleet\n"
    )
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "id-default-account")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "s-default")
    assumed = {"AccessKeyId": "STS.team-b", "AccessKeySecret": "x", "SecurityToken": "t"}
    assumed["Expiration"] = "2999-01-01T00:00:00Z"
    scoped = scoped_clients(_cfg_for_team_b(tmp_path), None)(("team-b", "cn-beijing"))
    with responses.RequestsMock(assert_all_requests_are_fired=False) as stub:
        stub.add(responses.GET, re.compile(r"https?://sts\..*"), json={"Credentials": assumed})
        stub.add(responses.POST, re.compile(r"https?://sts\..*"), json={"Credentials": assumed})
        assert _signing_key(scoped) == "STS.team-b"
        assert "AssumeRole" in stub.calls[0].request.url


def test_serve_refuses_an_account_whose_profile_is_missing(tmp_path, monkeypatch, capsys):
    _credentials(tmp_path, monkeypatch, "someone-else")
    path = _yaml(tmp_path, "asg-1", "asg-2", "123")
    assert main(["serve", "-c", path, "--once", "--no-api", "--database", "sqlite://"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "groups[beijing].account" in err and "team-b" in err


class _Waiting:
    """An ESS adapter whose DescribeScalingGroups waits (at most 2 s) for `other` to be set first."""

    def __init__(self, ess: Any, other: threading.Event, mine: threading.Event) -> None:
        self._ess, self.other, self.mine, self.waited_in_vain = ess, other, mine, False

    def describe_scaling_groups(self, *args: Any, **kwargs: Any) -> Any:
        self.mine.set()
        self.waited_in_vain = not self.other.wait(2.0)
        return self._ess.describe_scaling_groups(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ess, name)


def test_a_slow_region_does_not_hold_up_the_reads_of_another(tmp_path, monkeypatch):
    """Regions are read side by side: a region whose calls hang (a black-holed endpoint, Retry-After waits)
    costs the tick its own delay, not the sum of every region's."""
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, default, clients_for, _beijing):
        chengdu_read, beijing_read = threading.Event(), threading.Event()
        slow = _Waiting(default.ess, beijing_read, chengdu_read)  # Chengdu, read first, hangs on Beijing
        fast = _Waiting(clients_for(("team-b", "cn-beijing")).ess, threading.Event(), beijing_read)
        fast.other.set()
        wrapped = {
            (None, None): dataclasses.replace(default, ess=slow),
            ("team-b", "cn-beijing"): dataclasses.replace(clients_for(("team-b", "cn-beijing")), ess=fast),
        }
        svc.observer.clients_for = wrapped.__getitem__
        obs = svc.observer.observe(cloud.now())
        assert not slow.waited_in_vain  # Beijing was read while Chengdu hung
        assert obs.groups["chengdu"].ok and obs.groups["beijing"].ok
        assert list(obs.groups) == ["chengdu", "beijing"]


def test_an_unexpected_failure_in_one_region_leaves_the_others_observed(tmp_path, monkeypatch):
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, default, clients_for, _beijing):
        beijing = clients_for(("team-b", "cn-beijing"))

        def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise ValueError("invalid literal for int() with base 10: 'n/a'")  # a malformed answer

        monkeypatch.setattr(beijing.ess, "describe_scaling_instances", broken)
        svc.observer.invalidate("beijing")
        obs = svc.observer.observe(cloud.now())
        assert obs.groups["chengdu"].ok
        assert not obs.groups["beijing"].ok
        assert any("ValueError" in e and "n/a" in e for e in obs.groups["beijing"].errors)
        result = svc.tick(cloud.now())
        assert "chengdu" in result.observed_groups and "beijing" not in result.observed_groups


def test_two_regions_refused_by_ram_are_each_logged_with_region_and_cause(tmp_path, monkeypatch, caplog):
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, _default, _clients_for, _beijing):
        cloud.inject_fault(
            "DescribeScalingGroups", code="Forbidden.RAM", status=403, message="You are not authorized."
        )
        with caplog.at_level(logging.WARNING, logger="fleet.service.observe"):
            obs = svc.observer.observe(cloud.now())
        lines = [r.getMessage() for r in caplog.records if "DescribeScalingGroups" in r.getMessage()]
        assert len(lines) == 2  # one per region: neither held back behind the other's
        assert sum("cn-beijing" in line and "team-b" in line for line in lines) == 1
        for name in ("chengdu", "beijing"):
            assert not obs.groups[name].ok
            assert any("Forbidden.RAM" in e for e in obs.groups[name].errors)


def test_a_write_ram_denies_in_one_region_names_its_permission_and_the_other_region_scales(
    tmp_path, monkeypatch, capsys
):
    """team-b's role lacks ess:ScaleWithAdjustment: Beijing's scale-out fails once a tick, never retried,
    its audit, log and `fleet status` naming the permission and the policy; Chengdu scales as usual."""
    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, _default, _clients_for, beijing):
        cloud.deny("ess:ScaleWithAdjustment", access_key_id="id-team-b")
        for _ in range(4):
            obs = svc.observer.observe(cloud.now())
            for name in ("chengdu", "beijing"):
                for inst in obs.groups[name].instances:
                    cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, 9)
            result = svc.tick(cloud.now())
            cloud.advance(15)
        groups = {g.name: g for g in svc.observer.observe(cloud.now()).groups.values()}
        assert groups["chengdu"].group.desired_capacity > 1
        assert groups["beijing"].group.desired_capacity == 1
        failed = [d for d in svc.store.decisions(group="beijing", kind="scale") if d.outcome == "failed"]
        assert failed, [(d.group_name, d.outcome, d.error) for d in svc.store.decisions(kind="scale")]
        hint = (
            "missing RAM permission ess:ScaleWithAdjustment: grant it in the service role's policy "
            "(terraform/ module: alicloud_ram_policy.service)"
        )
        assert all(hint in (d.error or "") for d in failed)
        # one refused call per failed decision: a denial is not retried
        refused = [d for d in cloud.ram.denials if d["permission"] == "ess:ScaleWithAdjustment"]
        assert len(refused) == len(failed)
        assert result.leader
        db = f"sqlite:///{tmp_path / 'f.db'}"
        capsys.readouterr()
        assert main(["status", "--database", db]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "beijing: the last scale write failed" in out and "ess:ScaleWithAdjustment" in out
        assert "chengdu: the last scale write failed" not in out


def test_a_region_whose_reconcile_ram_denies_leaves_the_other_regions_writes_settled(tmp_path, monkeypatch):
    """Writes left `intended` by a crash in both regions: Chengdu's role may not read scaling activities
    (the group goes unobserved, the error names the permission), Beijing's intent is settled all the same."""
    from fleet.service.store import DecisionRecord

    with _two_regions(tmp_path, monkeypatch) as (cloud, svc, _default, _clients_for, _beijing):
        for name in ("chengdu", "beijing"):
            svc.store.record_decision(
                DecisionRecord(
                    service=svc.settings.service_name,
                    at=cloud.now(),
                    group_name=name,
                    kind="scale",
                    action="scale_to",
                    decision_id=f"{name}:crashed",
                    outcome="intended",
                    target=3,
                    client_token=f"{name}-crashed-1",
                )
            )
        cloud.deny("ess:DescribeScalingActivities", access_key_id=ENV["ALIBABA_CLOUD_ACCESS_KEY_ID"])
        result = svc.tick(cloud.now())
        scale = svc.store.decisions(kind="scale")
        rows = {d.group_name: d for d in scale if d.decision_id.endswith("crashed")}
        assert rows["beijing"].outcome == "error"  # settled: no activity shows it, retried with its token
        assert rows["chengdu"].outcome == "intended"  # left for a tick that can read its activities
        assert any("missing RAM permission ess:DescribeScalingActivities" in e for e in result.errors)
        assert result.observed_groups == ["beijing"]
