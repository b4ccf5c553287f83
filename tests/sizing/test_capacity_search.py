"""The capacity tests' geometric bisection: the largest passing value to within its factor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sizing.capacity import largest_passing


@given(st.floats(min_value=0.06, max_value=60.0))
def test_finds_the_threshold_to_within_the_factor_from_below(threshold):
    found = largest_passing(lambda x: x <= threshold, 0.05, 64.0, iterations=40)
    assert found <= threshold
    assert threshold / found < 1.03


def test_stops_after_its_iterations():
    probes: list[float] = []

    def passes(x: float) -> bool:
        probes.append(x)
        return x <= 1.0

    largest_passing(passes, 0.01, 256.0, iterations=3)
    assert len(probes) == 3


@pytest.mark.parametrize("hi", [2.0, 100.0])
def test_a_predicate_that_always_passes_approaches_hi(hi):
    assert hi / largest_passing(lambda _x: True, 0.5, hi, iterations=60) < 1.03
