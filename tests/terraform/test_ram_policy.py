"""The service's RAM policy grants exactly the Actions the cloud adapters call, and nothing broader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.cloud import cms, ecs, ess
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
def service_policy(module_dir) -> dict:
    documents = policy_documents(load_dir(module_dir))
    assert set(documents) == {"service"}
    return documents["service"]


def test_policy_grants_exactly_the_actions_the_adapters_call(service_policy):
    assert set(granted_actions(service_policy)) == adapter_actions()


def test_policy_lists_each_action_once_and_no_wildcard(service_policy):
    actions = granted_actions(service_policy)
    assert len(actions) == len(set(actions))
    assert not [a for a in actions if "*" in a or "?" in a]


def test_policy_is_attached_to_the_service_role(module_dir):
    resources = load_dir(module_dir).resources()
    attachments = [b for b in resources if b.labels[0] == "alicloud_ram_role_policy_attachment"]
    assert len(attachments) == 1
    body = attachments[0].body
    assert body["role_name"] == "${alicloud_ram_role.service.role_name}"
    assert body["policy_name"] == "${alicloud_ram_policy.service.policy_name}"
    assert body["policy_type"] == '"Custom"'


def test_sync_check_catches_a_wildcard_and_a_missing_action():
    kept = sorted(adapter_actions())[1:]  # one Action dropped
    text = (
        "locals {\n  actions = [" + ", ".join(f'"{a}"' for a in kept) + ', "ess:*"]\n}\n'
        'resource "alicloud_ram_policy" "service" {\n  policy_name = "p"\n'
        '  policy_document = jsonencode({ Version = "1", Statement = [{ Effect = "Allow", '
        'Action = local.actions, Resource = ["*"] }] })\n}\n'
    )
    document = policy_documents(TfConfig(Path("."), parse_text(text)))["service"]
    granted = set(granted_actions(document))
    assert granted != adapter_actions()
    assert granted - adapter_actions() == {"ess:*"}
    assert adapter_actions() - granted == {sorted(adapter_actions())[0]}
