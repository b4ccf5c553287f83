"""A fake NVML for tests and demos: the ``Nvml`` protocol over scripted GPUs, raising pynvml's own errors.

It copies NVML's behaviour, not the agent's: units as NVML reports them (milliwatts, bytes, MHz), errors as
``pynvml.NVMLError`` subclasses built from NVML's codes, event sets that answer ``Timeout`` when empty, and
calls before ``nvmlInit`` refused as ``Uninitialized``. Tests change a ``FakeGpu``'s fields between periods
(heat it up, set throttle bits, ``lose()`` it, ``push_xid()``), or build it with ``library_missing=True``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

# H20-like defaults (96 GiB HBM, 1980 MHz SM max boost): sane values for a healthy, moderately busy GPU.
_GIB = 1024**3


@dataclass
class FakeGpu:
    """One scripted GPU. Set a field to None to make NVML answer "Not Supported" for it."""

    name: str = "NVIDIA H20"
    uuid: str | None = None  # stable per board, as NVML's; None: derived from the index
    util_pct: int = 50
    mem_util_pct: int = 30
    mem_total_bytes: int = 96 * _GIB
    mem_used_bytes: int = 60 * _GIB
    temperature_c: int = 55
    slowdown_c: int | None = 87
    shutdown_c: int | None = 92
    sm_clock_mhz: int | None = 1980
    sm_clock_max_mhz: int | None = 1980
    power_mw: int | None = 350_000
    power_limit_mw: int | None = 500_000
    clock_event_reasons: int = 0
    ecc_uncorrected: int | None = 0
    ecc_corrected: int | None = 0
    # nvmlDeviceGetRemappedRows: None answers "Not Supported" (pre-Ampere boards such as the T4)
    row_remap_pending: bool | None = False
    row_remap_failure: bool | None = False
    # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0 none, 1 GPU reset, 2 node reboot, ...); None: not in this driver
    recovery_action: int | None = 0
    xid_supported: bool = True
    legacy_driver: bool = False  # only the pre-rename nvmlDeviceGetCurrentClocksThrottleReasons exists
    mig_mode: bool = False  # utilization is not reported for a GPU split into MIG instances
    is_lost: bool = False
    pending_xids: deque[int] = field(default_factory=deque)

    def lose(self, *, with_xid: bool = True) -> None:
        """The GPU falls off the bus: every call on it now fails with "GPU is lost" (and XID 79 fires, unless
        ``with_xid`` is false: an event set registered after the fall, or a vGPU that delivers no events)."""
        self.is_lost = True
        if with_xid:
            self.pending_xids.append(79)

    def push_xid(self, code: int) -> None:
        """Queue an XID critical error for the event set."""
        self.pending_xids.append(code)


@dataclass(frozen=True)
class _Handle:
    index: int


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    """Satisfies ``fleet.agent.nvml.Nvml`` over a list of ``FakeGpu``."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, library_missing: bool = False) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.library_missing = library_missing
        self.driver_unloaded = False  # set mid-run: every call fails as if the driver went away
        self.initialized = False
        self.init_calls = 0
        self._event_sets: list[dict[str, Any]] = []

    # -- library --------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.library_missing:
            raise _err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if self.driver_unloaded:
            raise _err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized = False

    def _check_init(self) -> None:
        if self.driver_unloaded:
            raise _err(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        if not self.initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        self._check_init()
        gpu = self.gpus[handle.index]
        if gpu.is_lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    @staticmethod
    def _supported(value: Any) -> Any:
        if value is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    # -- devices --------------------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        # nvml.h: GPU_IS_LOST "if the target GPU has fallen off the bus or is otherwise inaccessible"
        self._gpu(handle)
        return handle.index

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle).uuid or f"GPU-00000000-0000-0000-0000-{handle.index:012d}"

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        self._gpu(handle)
        return SimpleNamespace(busId=f"00000000:00:{7 + handle.index:02X}.0")

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle)
        if gpu.mig_mode:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util_pct, memory=gpu.mem_util_pct)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu(handle)
        return SimpleNamespace(
            total=gpu.mem_total_bytes, used=gpu.mem_used_bytes, free=gpu.mem_total_bytes - gpu.mem_used_bytes
        )

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpu(handle).temperature_c

    def nvmlDeviceGetTemperatureThreshold(self, handle: _Handle, threshold: int) -> int:
        gpu = self._gpu(handle)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return self._supported(gpu.slowdown_c)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return self._supported(gpu.shutdown_c)
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        if clock_type != pynvml.NVML_CLOCK_SM:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._supported(gpu.sm_clock_mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        if clock_type != pynvml.NVML_CLOCK_SM:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._supported(gpu.sm_clock_max_mhz)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._supported(self._gpu(handle).power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return self._supported(self._gpu(handle).power_limit_mw)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        if gpu.legacy_driver:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return gpu.clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._gpu(handle).clock_event_reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return self._supported(gpu.ecc_uncorrected)
        return self._supported(gpu.ecc_corrected)

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        gpu = self._gpu(handle)
        if gpu.row_remap_pending is None or gpu.row_remap_failure is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (0, int(gpu.row_remap_pending), int(gpu.row_remap_pending), int(gpu.row_remap_failure))

    def nvmlDeviceGetFieldValues(self, handle: _Handle, fieldIds: list[int]) -> list[Any]:
        gpu = self._gpu(handle)
        out = []
        for field_id in fieldIds:
            known = field_id == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and gpu.recovery_action is not None
            out.append(
                SimpleNamespace(
                    fieldId=field_id,
                    nvmlReturn=pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED,
                    valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                    value=SimpleNamespace(uiVal=gpu.recovery_action if known else 0),
                )
            )
        return out

    # -- events ---------------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> dict[str, Any]:
        self._check_init()
        event_set: dict[str, Any] = {"handles": [], "freed": False}
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: dict[str, Any]) -> None:
        gpu = self._gpu(handle)
        if event_types & pynvml.nvmlEventTypeXidCriticalError and not gpu.xid_supported:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        event_set["handles"].append(handle)

    def nvmlEventSetWait_v2(self, event_set: dict[str, Any], timeout_ms: int) -> Any:
        self._check_init()
        # A lost GPU still delivers its XID (79 is how a fall off the bus is announced), so no _gpu() here.
        for handle in event_set["handles"]:
            pending = self.gpus[handle.index].pending_xids
            if pending:
                return SimpleNamespace(
                    device=handle, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=pending.popleft()
                )
        raise _err(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: dict[str, Any]) -> None:
        self._check_init()
        event_set["freed"] = True
