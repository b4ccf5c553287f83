"""The offline schema check: the module and the example pass it, and it catches each class of mistake."""

from __future__ import annotations

import pytest

from fleet.terraform.check import check_module, check_text
from fleet.terraform.hcl import load_hcl_tfvars


def _messages(problems) -> str:
    return "\n".join(str(p) for p in problems)


def test_module_matches_the_provider_schema_with_the_example_inputs(schema, module_dir, example_dir):
    tfvars = load_hcl_tfvars(example_dir / "terraform.tfvars")
    problems = check_module(module_dir, schema, inputs={k: [v] for k, v in tfvars.items()})
    assert not problems, _messages(problems)


def test_module_without_inputs_reports_only_values_it_cannot_know(schema, module_dir):
    # Alone, the required variables (sizes, name) have no value: strict mode says so instead of passing.
    problems = check_module(module_dir, schema)
    assert {p.where for p in problems} == {
        "alicloud_ess_scaling_group.this.min_size",
        "alicloud_ess_scaling_group.this.max_size",
        "alicloud_ess_scaling_group.this.desired_capacity",
        "alicloud_ess_scaling_configuration.this.instance_name",
    }, _messages(problems)


def test_example_matches_the_schema_and_calls_the_module_correctly(schema, example_dir):
    problems = check_module(example_dir, schema)
    assert not problems, _messages(problems)


def test_module_resources_are_all_in_the_schema(schema, module_dir):
    from fleet.terraform.hcl import load_dir

    used = {b.labels[0] for b in load_dir(module_dir).resources()}
    assert used <= set(schema)
    assert {"alicloud_cms_alarm", "alicloud_ess_scaling_group", "alicloud_ram_policy"} <= used


# --- negative cases: one deliberately broken snippet per class of mistake --------------------------------

GROUP = """
resource "alicloud_ess_scaling_group" "g" {
  min_size    = 1
  max_size    = 2
  vswitch_ids = ["vsw-1"]
  %s
}
"""

ALARM_EACH = (
    'resource "alicloud_cms_alarm" "a" {\n  for_each = var.alarms\n  name = each.key\n  project = "p"\n'
    '  metric = "m"\n  contact_groups = ["g"]\n'
)

ALARM_VAR = """
variable "alarms" {
  type        = map(object({ op = string, level = optional(string, "critical") }))
  description = "alarms"
  default     = { a = { op = %s } }
}
"""


@pytest.mark.parametrize(
    ("snippet", "where", "expected"),
    [
        pytest.param(
            GROUP % 'colour = "blue"',
            "alicloud_ess_scaling_group.g.colour",
            "unknown argument",
            id="unknown-argument",
        ),
        pytest.param(
            GROUP % 'scaling_polic = "release"',
            "alicloud_ess_scaling_group.g.scaling_polic",
            "did you mean scaling_policy",
            id="unknown-argument-suggests",
        ),
        pytest.param(
            'resource "alicloud_ess_scaling_group" "g" {\n  max_size = 2\n}\n',
            "alicloud_ess_scaling_group.g.min_size",
            "missing required argument",
            id="missing-required",
        ),
        pytest.param(
            GROUP % 'scaling_policy = "delete"',
            "alicloud_ess_scaling_group.g.scaling_policy",
            "invalid value 'delete'",
            id="enum-literal",
        ),
        pytest.param(
            GROUP % "max_instance_lifetime = 60",
            "alicloud_ess_scaling_group.g.max_instance_lifetime",
            "outside the range",
            id="range",
        ),
        pytest.param(
            'resource "alicloud_ess_scaling_configuration" "c" {\n  scaling_group_id = "asg-1"\n'
            '  instance_type = "gn7i-c8g1.2xlarge"\n}\n',
            "alicloud_ess_scaling_configuration.c.instance_type",
            "does not match",
            id="regex",
        ),
        pytest.param(
            'resource "alicloud_cms_alarm" "a" {\n  name = "a"\n  project = "p"\n  metric = "m"\n'
            '  contact_groups = ["g"]\n  operator = ">"\n}\n',
            "alicloud_cms_alarm.a.operator",
            "removed from the provider",
            id="removed-argument",
        ),
        pytest.param(
            'resource "alicloud_ram_role" "r" {\n  role_name = "r"\n  arn = "acs:ram::1:role/r"\n}\n',
            "alicloud_ram_role.r.arn",
            "computed by the provider",
            id="computed-only",
        ),
        pytest.param(
            'resource "alicloud_ram_role" "r" {\n  name = "r"\n}\n',
            "alicloud_ram_role.r.name",
            "deprecated",
            id="deprecated",
        ),
        pytest.param(
            'resource "alicloud_cms_alarm" "a" {\n  name = "a"\n  project = "p"\n  metric = "m"\n'
            '  contact_groups = ["g"]\n  escalations_critical = { threshold = "1" }\n}\n',
            "alicloud_cms_alarm.a.escalations_critical",
            "is a block",
            id="block-as-attribute",
        ),
        pytest.param(
            'resource "alicloud_cms_alarm" "a" {\n  name = "a"\n  project = "p"\n  metric = "m"\n'
            '  contact_groups = ["g"]\n  webhook {\n  }\n}\n',
            "alicloud_cms_alarm.a.webhook",
            "is an argument",
            id="attribute-as-block",
        ),
        pytest.param(
            'resource "alicloud_cms_alarm" "a" {\n  name = "a"\n  project = "p"\n  metric = "m"\n'
            '  contact_groups = ["g"]\n  escalations_critical {\n    comparison_operator = "=>"\n  }\n}\n',
            "alicloud_cms_alarm.a.escalations_critical.comparison_operator",
            "invalid value '=>'",
            id="enum-in-nested-block",
        ),
        pytest.param(
            'resource "alicloud_cms_alarm" "a" {\n  name = "a"\n  project = "p"\n  metric = "m"\n'
            '  contact_groups = ["g"]\n  escalations_critical {\n  }\n  escalations_critical {\n  }\n}\n',
            "alicloud_cms_alarm.a.escalations_critical",
            "at most 1 block",
            id="too-many-blocks",
        ),
        pytest.param(
            GROUP % 'health_check_type = "ECS"\n  health_check_types = ["ECS"]',
            "alicloud_ess_scaling_group.g.health_check_type",
            "conflicts with health_check_types",
            id="conflicting-arguments",
        ),
        pytest.param(
            'resource "alicloud_instance" "i" {\n}\n',
            "alicloud_instance.i",
            "resource type not in the provider schema",
            id="unknown-resource-type",
        ),
        pytest.param(
            'variable "policy" {\n  type = string\n  description = "p"\n  default = "keep"\n}\n'
            + GROUP % "scaling_policy = var.policy",
            "alicloud_ess_scaling_group.g.scaling_policy",
            "invalid value 'keep'",
            id="enum-from-variable-default",
        ),
        pytest.param(
            'locals {\n  policy = "keep"\n}\n' + GROUP % "scaling_policy = local.policy",
            "alicloud_ess_scaling_group.g.scaling_policy",
            "invalid value 'keep'",
            id="enum-from-local",
        ),
        pytest.param(
            ALARM_VAR % '"=~"' + ALARM_EACH + "  escalations_critical {\n"
            "    comparison_operator = each.value.op\n  }\n}\n",
            "alicloud_cms_alarm.a.escalations_critical.comparison_operator",
            "invalid value '=~'",
            id="enum-from-each-value",
        ),
        pytest.param(
            ALARM_VAR % '"=~"' + ALARM_EACH + '  dynamic "escalations_warn" {\n'
            '    for_each = each.value.level == "warn" ? [each.value] : []\n    content {\n'
            "      comparison_operator = escalations_warn.value.op\n    }\n  }\n}\n",
            "alicloud_cms_alarm.a.escalations_warn.comparison_operator",
            "invalid value '=~'",
            id="enum-from-dynamic-iterator",
        ),
        pytest.param(
            GROUP % 'scaling_policy = var.unknowable\n  multi_az_policy = upper("x")',
            "alicloud_ess_scaling_group.g.multi_az_policy",
            "cannot be worked out offline",
            id="strict-unresolvable-value",
        ),
        pytest.param(
            'variable "x" {\n  type = string\n}\n',
            "variable.x",
            "has no description",
            id="variable-without-description",
        ),
        pytest.param(
            'variable "x" {\n  description = "x"\n}\n',
            "variable.x",
            "has no type",
            id="variable-without-type",
        ),
        pytest.param(
            'provider "alicloud" {\n  region = "cn-chengdu"\n}\n',
            "provider.alicloud",
            "must not configure providers",
            id="provider-in-module",
        ),
        pytest.param(
            GROUP % "" + 'output "g" {\n  value = alicloud_ess_scaling_group.g.scaling_policyy\n}\n',
            "output.g",
            "no attribute 'scaling_policyy' (did you mean scaling_policy",
            id="reference-to-unknown-attribute",
        ),
        pytest.param(
            'output "g" {\n  value = alicloud_ess_scaling_group.other.id\n}\n',
            "output.g",
            "does not declare",
            id="reference-to-undeclared-resource",
        ),
        pytest.param(
            GROUP % "scaling_policy = var.polcy",
            "alicloud_ess_scaling_group.g",
            "references var.polcy, which is not declared",
            id="reference-to-undeclared-variable",
        ),
    ],
)
def test_checker_catches(schema, snippet, where, expected):
    problems = check_text(snippet, schema)
    hits = [p for p in problems if p.where == where and expected in p.message]
    assert hits, f"expected {where}: {expected!r}; got:\n{_messages(problems)}"


def test_checker_checks_values_passed_in_for_variables(schema):
    snippet = (
        'variable "policy" {\n  type = string\n  description = "p"\n}\n'
        + GROUP % "scaling_policy = var.policy"
    )
    assert not check_text(snippet, schema, inputs={"policy": ["recycle"]})
    problems = check_text(snippet, schema, inputs={"policy": ["recycle", "keep"]})
    assert [p.message for p in problems] == [
        "invalid value 'keep'; valid values: recycle, release, forceRecycle, forceRelease"
    ]


def test_checker_applies_optional_attribute_defaults(schema):
    snippet = (
        'variable "alarm" {\n  type = object({ period_s = optional(number, 30) })\n  description = "a"\n'
        "  default = {}\n}\n"
        'resource "alicloud_ess_alarm" "a" {\n  scaling_group_id = "asg-1"\n  alarm_actions = ["ari"]\n'
        "  period = var.alarm.period_s\n}\n"
    )
    problems = check_text(snippet, schema)
    assert [p.message for p in problems] == ["invalid value 30; valid values: 60, 120, 300, 900"]


def test_checker_reports_the_line_of_the_argument(schema):
    problems = check_text(GROUP % 'colour = "blue"', schema, filename="x.tf")
    assert str(problems[0]).startswith("x.tf:6: ")


def test_module_call_with_unknown_and_missing_inputs_is_reported(schema, tmp_path):
    child = tmp_path / "child"
    child.mkdir()
    (child / "variables.tf").write_text(
        'variable "needed" {\n  type = string\n  description = "n"\n}\n'
        'variable "optional" {\n  type = string\n  description = "o"\n  default = "x"\n}\n'
    )
    root = tmp_path / "root"
    root.mkdir()
    (root / "main.tf").write_text('module "m" {\n  source = "../child"\n  optionl = "y"\n}\n')
    problems = check_module(root, schema)
    assert {(p.where, p.message.split(" (")[0]) for p in problems} == {
        ("module.m.optionl", "the module declares no such variable"),
        ("module.m.needed", "missing required module input"),
    }


# --- the command -------------------------------------------------------------------------------------------


def test_cli_check_passes_on_the_module_with_the_example_inputs(schema, module_dir, example_dir, capsys):
    from fleet.cli import main

    code = main(
        [
            "terraform",
            "check",
            str(module_dir),
            str(example_dir),
            "--var-file",
            str(example_dir / "terraform.tfvars"),
        ]
    )
    assert code == 0, capsys.readouterr().err


def test_cli_check_prints_each_problem_and_exits_1(schema, tmp_path, capsys):
    from fleet.cli import main

    (tmp_path / "main.tf").write_text(GROUP % 'scaling_policy = "delete"')
    code = main(["terraform", "check", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "main.tf:6: alicloud_ess_scaling_group.g.scaling_policy: invalid value 'delete'" in err


def test_cli_check_of_a_missing_directory_exits_2(schema, tmp_path, capsys):
    from fleet.cli import main

    assert main(["terraform", "check", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_cli_check_of_a_directory_without_tf_files_exits_2(schema, tmp_path, capsys):
    from fleet.cli import main

    (tmp_path / "README.md").write_text("no module here\n")
    assert main(["terraform", "check", str(tmp_path)]) == 2
    assert "no .tf files: not a Terraform module" in capsys.readouterr().err
