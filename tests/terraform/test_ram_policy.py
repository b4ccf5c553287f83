"""The RAM policies grant each identity exactly the Actions its code calls, and nothing broader: the service
role what fleet.cloud.permissions.SERVICE lists, the instances' role (the node agent) what AGENT lists
(tests/fleet/cloud/test_actions.py derives both from the source)."""

from __future__ import annotations

import json
import re
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


# RAM's own name rules (CreateRole: letters, digits, '.' and '-', 1-64; CreatePolicy: letters, digits and '-',
# 1-128), which the module's `name` (letters, digits, '.', '_', '-') does not imply.
RAM_ROLE_NAME = re.compile(r"^[A-Za-z0-9.-]{1,64}$")
RAM_POLICY_NAME = re.compile(r"^[A-Za-z0-9-]{1,128}$")


@pytest.mark.parametrize("name", ["chat-7b", "chat_7b.v2", "Chat.Prod", "9" + "x" * 39, "a_b"])
def test_ram_names_are_ones_ram_accepts_for_every_name_the_module_accepts(module_dir, name):
    config = load_dir(module_dir)
    scope = ModuleScope(config, {"name": [name], "instance_ram_role_name": ["nodes"]})
    named = {}
    for block in config.resources():
        kind, label = block.labels
        attribute = {"alicloud_ram_role": "role_name", "alicloud_ram_policy": "policy_name"}.get(kind)
        if attribute is None:
            continue
        values = scope.value_of(block.body[attribute], scope.scope())
        assert isinstance(values, list) and len(values) == 1, (kind, label, values)
        named[(kind, label)] = values[0]
    assert set(named) == {
        ("alicloud_ram_role", "service"),
        ("alicloud_ram_policy", "service"),
        ("alicloud_ram_policy", "node_agent"),
    }
    assert RAM_ROLE_NAME.match(named[("alicloud_ram_role", "service")]), named
    assert RAM_POLICY_NAME.match(named[("alicloud_ram_policy", "service")]), named
    assert RAM_POLICY_NAME.match(named[("alicloud_ram_policy", "node_agent")]), named
    if name == "chat-7b":
        assert named[("alicloud_ram_role", "service")] == "chat-7b-fleet-service"
        assert named[("alicloud_ram_policy", "service")] == "chat-7b-fleet-service-policy"


def test_a_given_service_role_name_keeps_its_dots_and_its_policy_drops_them(module_dir):
    config = load_dir(module_dir)
    scope = ModuleScope(config, {"name": ["chat"], "service_role_name": ["fleet.svc-b"]})
    [policy] = [b for b in config.resources() if b.labels == ("alicloud_ram_policy", "service")]
    [role] = [b for b in config.resources() if b.labels == ("alicloud_ram_role", "service")]
    assert scope.value_of(role.body["role_name"], scope.scope()) == ["fleet.svc-b"]
    assert scope.value_of(policy.body["policy_name"], scope.scope()) == ["fleet-svc-b-policy"]
