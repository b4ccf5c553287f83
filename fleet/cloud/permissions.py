"""The RAM permissions each fleet identity needs, as a RAM policy names them (`ess:ScaleWithAdjustment`).

Two identities call the cloud:

- the service role (`fleet serve`, and `fleet diagnose` run with the same credentials): `SERVICE`, granted by
  the module's `alicloud_ram_policy.service` (terraform/main.tf, `local.service_actions`);
- the GPU instances' role (`fleet agent`): `AGENT`, granted by `alicloud_ram_policy.node_agent`
  (`local.node_agent_actions`), attached to `instance_ram_role_name`.

The adapters' `ACTIONS` list what they can send; these sets hold what the code of each identity does call
(tests/fleet/cloud/test_actions.py derives them from the source, tests/terraform checks the policies grant
exactly them). A denied call names its permission and the policy that grants it (`denial_hint`).
"""

from __future__ import annotations

# The RAM code of each adapter's product (CMS's endpoint is metrics.<region>, its RAM code cms).
RAM_CODES = {"ess": "ess", "cms": "cms", "ecs": "ecs"}

SERVICE: frozenset[str] = frozenset(
    {
        "cms:DescribeMetricLast",
        "cms:DescribeMetricList",
        "ecs:DescribeInstances",
        "ecs:DescribeInstancesFullStatus",
        "ecs:RebootInstance",
        "ess:CompleteLifecycleAction",
        "ess:CreateScheduledTask",
        "ess:DeleteScheduledTask",
        "ess:DescribeLifecycleActions",
        "ess:DescribeScalingActivities",
        "ess:DescribeScalingGroups",
        "ess:DescribeScalingInstances",
        "ess:DescribeScheduledTasks",
        "ess:EnterStandby",
        "ess:ExitStandby",
        "ess:ModifyScalingConfiguration",
        "ess:ModifyScalingGroup",
        "ess:ModifyScheduledTask",
        "ess:RemoveInstances",
        "ess:ScaleWithAdjustment",
    }
)

AGENT: frozenset[str] = frozenset({"cms:PutCustomMetric"})

SERVICE_POLICY = "the service role's policy (terraform/ module: alicloud_ram_policy.service)"
AGENT_POLICY = "the instance role's policy (terraform/ module: alicloud_ram_policy.node_agent)"


def permission(product: str, action: str) -> str:
    """`ess:ScaleWithAdjustment`: the Action as a RAM policy's Action element names it."""
    return f"{RAM_CODES.get(product, product)}:{action}"


def denial_hint(product: str | None, action: str | None) -> str:
    """What an operator must grant after a RAM denial of `action`, in one phrase."""
    if not action:
        return "grant the Action that was denied to the caller's RAM identity"
    if not product:
        return f"grant RAM permission for {action} to the caller's RAM identity"
    needed = permission(product, action)
    if needed in AGENT:
        where = AGENT_POLICY
    elif needed in SERVICE:
        where = SERVICE_POLICY
    else:
        where = "the caller's RAM policy"
    return f"missing RAM permission {needed}: grant it in {where}"
