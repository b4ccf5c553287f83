"""docs/policies.md documents every code a plan can carry."""

from pathlib import Path

import pytest

from policies import ReasonCode, StepAction, WarningCode

DOC = (Path(__file__).resolve().parents[2] / "docs" / "policies.md").read_text()


@pytest.mark.parametrize("code", [c.value for c in (*ReasonCode, *WarningCode, *StepAction)])
def test_every_code_is_documented(code):
    assert f"`{code}`" in DOC
