"""Properties of the analysis core over random windows: it never fails, and its findings are well formed."""

from __future__ import annotations

import random

from diagnose_windows import HEALTHY, IDS, make_window
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.diagnose.rules import KINDS, diagnose

# Metrics a random window scrambles: any value (NaN and gaps included), per instance.
SCRAMBLED = sorted(HEALTHY)

value = st.one_of(st.none(), st.just(float("nan")), st.floats(min_value=-1.0, max_value=1e5))
# a short pattern repeated over the window's 32 samples keeps the examples small
pattern = st.lists(value, min_size=1, max_size=6)


@st.composite
def random_window(draw):
    changes = {}
    for iid in draw(st.lists(st.sampled_from(IDS), unique=True)):
        metrics = draw(st.lists(st.sampled_from(SCRAMBLED), unique=True, max_size=5))
        changes[iid] = {m: (lambda k, s=draw(pattern): s[k % len(s)]) for m in metrics}
    return make_window(changes, group={"slo_tpot_p99_ms": draw(st.one_of(st.none(), st.floats(10, 200)))})


@st.composite
def healthy_noise(draw):
    """Every instance near the healthy values of a fleet at moderate load (within +-10%)."""
    rnd = random.Random(draw(st.integers(0, 2**32)))
    changes = {}
    for iid in IDS:
        changes[iid] = {
            m: (lambda k, s=[rnd.uniform(0.9, 1.1) for _ in range(32)], b=base: b * s[k])
            for m, base in HEALTHY.items()
            if m not in ("gpu_throttle_reasons", "gpu_xid", "gpu_sm_clock_ratio")
        }
    return make_window(changes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(random_window())
def test_any_window_gives_well_formed_findings(window):
    ids = {i.instance_id for i in window.instances}
    for f in diagnose(window):
        assert f.kind in KINDS
        assert f.severity in ("critical", "warning", "info")
        assert set(f.scope) <= ids | {window.group.name}
        assert f.explanation and f.fix
        f.to_json()  # JSON-safe evidence


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(healthy_noise())
def test_noise_around_a_healthy_fleet_gives_no_findings(window):
    assert diagnose(window) == []
