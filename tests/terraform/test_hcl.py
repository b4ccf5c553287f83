"""The offline HCL helpers: type constraints, optional defaults, the small expression evaluator."""

from __future__ import annotations

import pytest

from fleet.terraform.hcl import (
    UNKNOWN,
    HclError,
    apply_defaults,
    evaluate,
    literal,
    parse_expression,
    parse_template,
    parse_type,
    type_errors,
)

ALARMS = (
    '${map(object({metric = string, times = optional(number, 3), level = optional(string, "critical")}))}'
)


def test_type_with_optional_defaults_fills_them_in():
    value = apply_defaults(parse_type(ALARMS), {"a": {"metric": "m", "times": 5}})
    assert value == {"a": {"metric": "m", "times": 5, "level": "critical"}}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": {"metric": "m"}}, []),
        ({"a": {"metric": 5}}, []),  # Terraform converts numbers to strings
        ({"a": {"metric": "m", "times": "4"}}, []),  # and numeric strings to numbers
        ({"a": {"metric": "m", "times": "four"}}, ["value.a.times: expected a number, got 'four'"]),
        ({"a": {"times": 4}}, ["value.a: missing required attribute 'metric'"]),
        ({"a": []}, ["value.a: expected an object, got list"]),
        (["x"], ["value: expected a map, got list"]),
    ],
)
def test_type_errors_follow_terraform_conversions(value, expected):
    assert type_errors(parse_type(ALARMS), value) == expected


def test_unreadable_type_is_an_error():
    with pytest.raises(HclError):
        parse_type("${map(strng)}")


def _scope(**vars_):
    return {"var": lambda parts: [vars_[parts[0]]] if parts and parts[0] in vars_ else UNKNOWN}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('"a"', ["a"]),
        ("var.x", ["v"]),
        ('var.flag ? var.x : "other"', ["v", "other"]),  # both branches: checks hold whichever is taken
        ("tostring(3)", ["3"]),
        ('coalesce(var.nothing, "d")', ["d"]),
        ('[var.x, "y"]', [["v", "y"]]),
        ("{ a = var.x }", [{"a": "v"}]),
        ("upper(var.x)", UNKNOWN),
        ("var.missing", UNKNOWN),
        ("aws_thing.x.id", UNKNOWN),
    ],
)
def test_evaluate(expression, expected):
    assert evaluate(parse_expression(expression), _scope(x="v", flag=True, nothing=None)) == expected


def test_template_interpolates_every_candidate():
    assert evaluate(parse_template("${var.x}-gpu"), _scope(x="chat")) == ["chat-gpu"]


def test_literal_unquotes_and_keeps_expressions_unknown():
    assert literal('"a \\"b\\""') == 'a "b"'
    assert literal({"k": ['"x"', 1, True]}) == {"k": ["x", 1, True]}
    assert literal("${var.x}") is UNKNOWN
