"""The first-order thermal model and the throttling it causes."""

from __future__ import annotations

import math

import pytest

from fleet.sim.thermal import THROTTLE_HW_THERMAL, THROTTLE_SW_THERMAL, GpuThermal, ThermalParams


def test_temperature_relaxes_toward_the_utilization_steady_state():
    p = ThermalParams()
    g = GpuThermal.at_idle(p)
    g.step(p.tau_s, 1.0)  # one time constant: 63% of the way
    expected = p.full_load_c - (p.full_load_c - p.idle_c) * math.exp(-1)
    assert g.temperature_c == pytest.approx(expected)


def test_step_size_does_not_change_the_trajectory():
    p = ThermalParams()
    a, b = GpuThermal.at_idle(p), GpuThermal.at_idle(p)
    a.step(300.0, 0.7)
    for _ in range(300):
        b.step(1.0, 0.7)
    assert a.temperature_c == pytest.approx(b.temperature_c)


def test_healthy_gpu_at_full_load_never_throttles():
    g = GpuThermal.at_idle(ThermalParams())
    g.step(3600.0, 1.0)
    assert not g.throttled and g.throttle_reasons == 0 and g.clock_ratio == 1.0


def test_cooling_fault_overheats_and_throttles():
    p = ThermalParams()
    g = GpuThermal.at_idle(p)
    g.extra_c = 35.0
    g.step(1800.0, 0.6)
    assert g.temperature_c > 85.0
    assert g.throttled
    assert g.throttle_reasons & THROTTLE_SW_THERMAL and g.throttle_reasons & THROTTLE_HW_THERMAL
    assert g.clock_ratio == p.throttled_clock_ratio


def test_power_rises_with_utilization():
    g = GpuThermal.at_idle(ThermalParams())
    assert g.power_w(1.0) > g.power_w(0.2) > g.power_w(0.0)
