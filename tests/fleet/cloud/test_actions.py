"""Each module's ACTIONS is exactly the set of wire Actions its adapter sends (the RAM policy reads it).

Every public adapter method is run once; the x-acs-action headers seen on the wire must equal the union of the
ACTIONS tuples, and every public method must be in the table below, so neither list can drift.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fleet.cloud import CustomMetric, cms, ecs, ess, permissions
from fleet.cloud.clients import CloudClients

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)

# Enough of every answer shape for any Action here.
ANY_ANSWER = {
    "Code": "200",
    "Success": True,
    "Datapoints": "[]",
    "TotalCount": 0,
    "ScalingActivityId": "asa-1",
    "ScheduledTaskId": "st-1",
}


def calls_for(c: CloudClients) -> dict[str, Callable[[], object]]:
    """One call of every public adapter method, keyed 'product.method'."""
    return {
        "ess.describe_scaling_groups": lambda: c.ess.describe_scaling_groups(),
        "ess.describe_scaling_instances": lambda: c.ess.describe_scaling_instances("asg-1"),
        "ess.describe_scaling_activities": lambda: c.ess.describe_scaling_activities("asg-1"),
        "ess.scale_to": lambda: c.ess.scale_to("asg-1", 2, client_token="t1"),
        "ess.modify_scaling_group": lambda: c.ess.modify_scaling_group("asg-1", max_size=4),
        "ess.describe_scheduled_tasks": lambda: c.ess.describe_scheduled_tasks("asg-1"),
        "ess.create_scheduled_task": lambda: c.ess.create_scheduled_task(
            "asg-1", "t", T0 + timedelta(days=1), "Daily", "1", min_value=1, max_value=4
        ),
        "ess.modify_scheduled_task": lambda: c.ess.modify_scheduled_task("st-1", max_value=5),
        "ess.delete_scheduled_task": lambda: c.ess.delete_scheduled_task("st-1"),
        "ess.enter_standby": lambda: c.ess.enter_standby("asg-1", ["i-1"], client_token="t2"),
        "ess.exit_standby": lambda: c.ess.exit_standby("asg-1", ["i-1"], client_token="t3"),
        "ess.remove_instances": lambda: c.ess.remove_instances("asg-1", ["i-1"], client_token="t4"),
        "ess.set_instances_protection": lambda: c.ess.set_instances_protection("asg-1", ["i-1"], True),
        "ess.describe_lifecycle_actions": lambda: c.ess.describe_lifecycle_actions("asa-1"),
        "ess.complete_lifecycle_action": lambda: c.ess.complete_lifecycle_action(
            "ash-1", "token-1", client_token="t5"
        ),
        "ess.modify_scaling_configuration": lambda: c.ess.modify_scaling_configuration(
            "asc-1", instance_types=["ecs.gn7i-c8g1.2xlarge"]
        ),
        "ess.set_vswitch_order": lambda: c.ess.set_vswitch_order("asg-1", ["vsw-a", "vsw-b"]),
        "cms.metric_last": lambda: c.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"]),
        "cms.metric_list": lambda: c.cms.metric_list(
            "acs_ecs_dashboard", "m", ["i-1"], T0, T0 + timedelta(minutes=1)
        ),
        "cms.put_custom_metrics": lambda: c.cms.put_custom_metrics(
            [CustomMetric("m", {"instanceId": "i-1"}, 1.0, T0)]
        ),
        "ecs.describe_instances": lambda: c.ecs.describe_instances(["i-1"]),
        "ecs.describe_full_status": lambda: c.ecs.describe_full_status(["i-1"]),
        "ecs.describe_full_status_exceptions": lambda: c.ecs.describe_full_status_exceptions(),
        "ecs.describe_history_events": lambda: c.ecs.describe_history_events(["i-1"]),
        "ecs.reboot_instance": lambda: c.ecs.reboot_instance("i-1"),
    }


def public_methods(adapter: object) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(type(adapter), inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_public_method_is_exercised(clients):
    table = set(calls_for(clients))
    expected = {f"{p}.{m}" for p in ("ess", "cms", "ecs") for m in public_methods(getattr(clients, p))}
    assert table == expected


def test_actions_tuples_equal_the_actions_sent(stub, clients):
    for action in ess.ACTIONS + cms.ACTIONS + ecs.ACTIONS + ("Unlisted",):
        stub.on(action, ANY_ANSWER)
    for call in calls_for(clients).values():
        call()
    sent = {(c.host.split(".")[0], c.action) for c in stub.calls}
    declared = (
        {("ess", a) for a in ess.ACTIONS}
        | {("metrics", a) for a in cms.ACTIONS}
        | {("ecs", a) for a in ecs.ACTIONS}
    )
    assert sent == declared
    assert len(ess.ACTIONS + cms.ACTIONS + ecs.ACTIONS) == len(declared)  # no duplicates


FLEET = Path(__file__).resolve().parents[3] / "fleet"
# Who runs what: the agent's code runs under the instances' role; the fake cloud, the simulator (which drives
# the fake) and the adapters themselves run under no role of the fleet's; everything else runs as the service.
AGENT_CODE = ("agent", "commands/agent.py")
NO_ROLE_CODE = ("cloud", "testing", "sim")


def names_used(files: list[Path]) -> set[str]:
    """Every attribute name and string constant in the files: a method called, passed on or looked up."""
    used: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    return used


def code_of(kind: str) -> list[Path]:
    files = sorted(FLEET.rglob("*.py"))
    rel = {f: f.relative_to(FLEET).as_posix() for f in files}
    agent = [f for f in files if rel[f].startswith(AGENT_CODE)]
    if kind == "agent":
        return agent
    return [f for f in files if f not in agent and not rel[f].startswith(NO_ROLE_CODE)]


def method_permissions(stub, clients) -> dict[str, set[str]]:
    """'product.method' -> the RAM permissions its wire calls need."""
    for action in ess.ACTIONS + cms.ACTIONS + ecs.ACTIONS:
        stub.on(action, ANY_ANSWER)
    products = {"ess": "ess", "metrics": "cms", "ecs": "ecs"}
    needs = {}
    for key, call in calls_for(clients).items():
        stub.calls.clear()
        call()
        needs[key] = {permissions.permission(products[c.host.split(".")[0]], c.action) for c in stub.calls}
    return needs


def test_each_identity_needs_exactly_the_permissions_its_code_calls(stub, clients):
    needs = method_permissions(stub, clients)
    for kind, declared in (("service", permissions.SERVICE), ("agent", permissions.AGENT)):
        used = names_used(code_of(kind))
        called = set().union(*(needs[key] for key in needs if key.split(".")[1] in used))
        assert called == declared, (kind, sorted(called ^ declared))


def test_the_audit_sees_a_method_passed_by_name(stub, clients, tmp_path):
    # observe.py reaches describe_full_status_exceptions through getattr: a string counts as a use.
    source = tmp_path / "m.py"
    source.write_text('scan = getattr(clients.ecs, "describe_full_status_exceptions", None)\n')
    used = names_used([source])
    needs = method_permissions(stub, clients)
    assert needs["ecs.describe_full_status_exceptions"] <= {
        p for key in needs if key.split(".")[1] in used for p in needs[key]
    }
    assert "ecs:DescribeInstancesFullStatus" in needs["ecs.describe_full_status_exceptions"]
