"""A first-order thermal model of one GPU, and what the driver reports about it.

Temperature relaxes exponentially toward a steady state set by utilization (and, under an injected cooling
fault, an extra offset): ``dT/dt = (T_ss(util) - T) / tau``. Above the slowdown temperature the driver
throttles the SM clock and raises the thermal clock-event reasons, which slows the engine by the clock ratio.

Defaults are typical of data-centre cards under air cooling: ~35 C idle inlet-side, ~75 C at full load, a time
constant of about two minutes; NVIDIA data-centre parts start thermal slowdown around 87-90 C (``nvidia-smi
-q`` "GPU Slowdown Temp"), so 88 C is used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# NVML clocks-event reason bits (nvml.h, nvmlClocksEventReason*): the ones a thermal problem raises.
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40


@dataclass(frozen=True)
class ThermalParams:
    idle_c: float = 35.0
    full_load_c: float = 75.0
    tau_s: float = 120.0
    slowdown_c: float = 88.0
    throttled_clock_ratio: float = 0.6
    idle_power_w: float = 60.0
    full_power_w: float = 300.0

    def steady_state_c(self, util: float, extra_c: float = 0.0) -> float:
        u = min(1.0, max(0.0, util))
        return self.idle_c + (self.full_load_c - self.idle_c) * u + extra_c


@dataclass
class GpuThermal:
    """One GPU's temperature state; ``step`` moves it ``dt_s`` forward at a constant utilization."""

    params: ThermalParams
    temperature_c: float
    extra_c: float = 0.0  # an injected cooling fault adds this much to the steady state

    @classmethod
    def at_idle(cls, params: ThermalParams) -> GpuThermal:
        return cls(params, params.idle_c)

    def step(self, dt_s: float, util: float) -> float:
        target = self.params.steady_state_c(util, self.extra_c)
        self.temperature_c = target + (self.temperature_c - target) * math.exp(-dt_s / self.params.tau_s)
        return self.temperature_c

    @property
    def throttled(self) -> bool:
        return self.temperature_c >= self.params.slowdown_c

    @property
    def throttle_reasons(self) -> int:
        return (THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL) if self.throttled else 0

    @property
    def clock_ratio(self) -> float:
        return self.params.throttled_clock_ratio if self.throttled else 1.0

    def power_w(self, util: float) -> float:
        u = min(1.0, max(0.0, util)) * self.clock_ratio
        return self.params.idle_power_w + (self.params.full_power_w - self.params.idle_power_w) * u
