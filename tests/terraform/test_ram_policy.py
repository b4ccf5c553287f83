"""The RAM policies grant each identity exactly the Actions its code calls, and nothing broader: the service
role what fleet.cloud.permissions.SERVICE lists, the instances' role (the node agent) what AGENT lists
(tests/fleet/cloud/test_actions.py derives both from the source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.cloud import cms, ecs, ess, permissions
from fleet.terraform.check import ModuleScope
from fleet.terraform.hcl import TfConfig, load_dir, parse_text


def adapter_actions() -> set[str]:
    """The union of the adapters' ACTIONS, as RAM names them (product:Action)."""
    return {
        f"{product}:{action}"
        for product, module in (("ess", ess), ("cms", cms), ("ecs", ecs))
        for action in module.ACTIONS
    }


def policy_documents(config: TfConfig, attribute: str = "policy_document") -> dict[str, dict]:
    """Every alicloud_ram_policy's document, evaluated offline (jsonencode of locals and literals)."""
    scope = ModuleScope(config, None)
    documents = {}
    for block in config.resources():
        if block.labels[0] != "alicloud_ram_policy":
            continue
        values = scope.value_of(block.body[attribute], scope.scope())
        assert isinstance(values, list) and len(values) == 1, f"{block.labels[1]}: document is not constant"
        documents[block.labels[1]] = json.loads(values[0])
    return documents


def granted_actions(document: dict) -> list[str]:
    actions: list[str] = []
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow"
        listed = statement["Action"]
        actions.extend([listed] if isinstance(listed, str) else listed)
    return actions


@pytest.fixture(scope="module")
def documents(module_dir) -> dict[str, dict]:
    documents = policy_documents(load_dir(module_dir))
    assert set(documents) == {"service", "node_agent"}
    return documents


@pytest.fixture(scope="module")
def service_policy(documents) -> dict:
    return documents["service"]


def test_policy_grants_exactly_the_actions_the_service_calls(service_policy):
    assert set(granted_actions(service_policy)) == permissions.SERVICE


def test_node_agent_policy_grants_exactly_what_the_agent_calls(documents):
    assert set(granted_actions(documents["node_agent"])) == permissions.AGENT == {"cms:PutCustomMetric"}


def test_the_two_policies_cover_every_action_called_and_share_none(documents):
    service, agent = (set(granted_actions(documents[n])) for n in ("service", "node_agent"))
    assert not service & agent  # the service role cannot publish the metrics it acts on
    assert service | agent <= adapter_actions()


@pytest.mark.parametrize("name", ["service", "node_agent"])
def test_policy_lists_each_action_once_and_no_wildcard(documents, name):
    actions = granted_actions(documents[name])
    assert len(actions) == len(set(actions))
    assert not [a for a in actions if "*" in a or "?" in a]


def test_policies_are_attached_to_their_roles(module_dir):
    resources = load_dir(module_dir).resources()
    attachments = {
        b.labels[1]: b.body for b in resources if b.labels[0] == "alicloud_ram_role_policy_attachment"
    }
    assert set(attachments) == {"service", "node_agent"}
    body = attachments["service"]
    assert body["role_name"] == "${alicloud_ram_role.service.role_name}"
    assert body["policy_name"] == "${alicloud_ram_policy.service.policy_name}"
    assert body["policy_type"] == '"Custom"'
    body = attachments["node_agent"]
    assert body["count"] == "${var.instance_ram_role_name == null ? 0 : 1}"
    assert body["role_name"] == "${var.instance_ram_role_name}"
    assert body["policy_name"] == "${alicloud_ram_policy.node_agent[0].policy_name}"
    assert body["policy_type"] == '"Custom"'


def test_sync_check_catches_a_wildcard_and_a_missing_action():
    kept = sorted(permissions.SERVICE)[1:]  # one Action dropped
    text = (
        "locals {\n  actions = [" + ", ".join(f'"{a}"' for a in kept) + ', "ess:*"]\n}\n'
        'resource "alicloud_ram_policy" "service" {\n  policy_name = "p"\n'
        '  policy_document = jsonencode({ Version = "1", Statement = [{ Effect = "Allow", '
        'Action = local.actions, Resource = ["*"] }] })\n}\n'
    )
    document = policy_documents(TfConfig(Path("."), parse_text(text)))["service"]
    granted = set(granted_actions(document))
    assert granted != permissions.SERVICE
    assert granted - permissions.SERVICE == {"ess:*"}
    assert permissions.SERVICE - granted == {sorted(permissions.SERVICE)[0]}
