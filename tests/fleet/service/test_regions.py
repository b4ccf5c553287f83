"""Several regions and accounts in one fleet.yaml: clients and observation per (account, region), each
account's own custom-metric namespace, and `fleet validate` refusing a profile the credentials lack."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Iterator
from typing import Any

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
