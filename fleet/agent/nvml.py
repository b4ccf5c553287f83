"""GPU readings through NVML: the narrow ``Nvml`` protocol, the reading types, and the per-period collector.

``Nvml`` lists exactly the NVML entry points the agent calls, under nvidia-ml-py's own names, so that the real
``pynvml`` module satisfies it as is and a fake (``fleet.agent.fake_nvml``) can stand in for it in tests.
Errors are pynvml's own ``NVMLError`` subclasses in both cases, so the handling below is the code that runs on
a GPU.

Failure model: NVML missing (no driver, no library) makes the whole GPU side unavailable, which is reported
(``nvml_ok`` false with the reason) and retried every period; a GPU that falls off the bus (``GPU is lost``)
is reported as lost for that GPU while the others are still read; a field a GPU does not support (ECC on a
consumer card, thresholds on some boards) is simply absent.

NVML's own ``NVML_ERROR_GPU_IS_LOST`` ("the GPU has fallen off the bus or has otherwise become
inaccessible") is also read as XID 79, the code the driver logs for that event, so that a lost GPU whose
XID reached neither source (it fell before the agent registered for events, on a vGPU that delivers none,
with the kernel log unreadable) still raises the hardware signal. Each fall counts once: see
``GpuCollector._count_falls``.

XIDs come from two sources: NVML's event set, and (when the collector is given one) the kernel log
(``fleet.agent.kmsg``), whose records name the GPU by PCI bus id and are mapped to the NVML index here. The
two are merged so that one XID seen by both counts once (``merge_xid_events``); kernel-log XIDs are still
reported while NVML is down, when they are often the only word of what happened.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import pynvml

from fleet.agent.kmsg import (
    XID_FALLEN_OFF_THE_BUS,
    XID_RECOVERY_ACTION_CHANGED,
    KernelLogReader,
    KernelXid,
    normalize_pci_bus_id,
)
from fleet.agent.state import Falls, FallsFile
from policies import metrics as pm

# Clock event ("throttle") reason bits, from NVML's nvmlClocksEventReason* constants (nvml.h, as exposed by
# nvidia-ml-py). The published bitmask carries every bit as NVML reports it (the policies match named bits);
# these five are the "distress" reasons, held below the wanted clock, that make a GPU count as throttled.
# Idle, application/user clocks, sync boost and display clocks are normal operation.
THROTTLE_REASON_BITS: dict[str, int] = {
    "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,  # 0x4: power draw at the enforced limit
    "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,  # 0x8: HW slowdown (thermal or power brake)
    "sw_thermal_slowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,  # 0x20
    "hw_thermal_slowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,  # 0x40
    "hw_power_brake_slowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,  # 0x80
}
# The benign bits: decoded and published, but never "throttled" on their own.
BENIGN_REASON_BITS: dict[str, int] = {
    "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,  # 0x1
    "applications_clocks_setting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,  # 0x2
    "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,  # 0x10
    "display_clock_setting": pynvml.nvmlClocksEventReasonDisplayClockSetting,  # 0x100
}
THROTTLE_MASK = 0
for _bit in THROTTLE_REASON_BITS.values():
    THROTTLE_MASK |= _bit

# At most this many XID events are drained per period, so a GPU storming events cannot stall the loop.
MAX_XID_EVENTS_PER_PERIOD = 64


def decode_clock_event_reasons(mask: int) -> list[str]:
    """Names of the reasons set in an NVML clock event bitmask (distress reasons first)."""
    names = [name for name, bit in THROTTLE_REASON_BITS.items() if mask & bit]
    names += [name for name, bit in BENIGN_REASON_BITS.items() if mask & bit]
    return names


class Nvml(Protocol):
    """The NVML calls the agent makes (nvidia-ml-py names; the ``pynvml`` module itself satisfies this)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any) -> int: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[int]) -> Any: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


def load_nvml() -> Nvml:
    """The real NVML (nvidia-ml-py). Importing it needs no driver; ``nvmlInit`` fails cleanly without one."""
    return pynvml  # untyped (no stubs): the Nvml Protocol above is its type


@dataclass
class GpuReading:
    """One GPU at one moment. Fields a GPU does not support are None."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False  # fell off the bus (NVML: GPU is lost / reset required)
    gpu_is_lost: bool = False  # NVML answered NVML_ERROR_GPU_IS_LOST itself: read as XID 79
    error: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_used_pct: float | None = None
    # NVML utilization.memory: percent of the sample period the device memory was being read or written.
    mem_bw_util_pct: float | None = None
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    temperature_shutdown_c: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    sm_clock_ratio: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    clock_event_reasons_raw: int | None = None
    throttle_reasons: int | None = None  # the distress bits only: raw & THROTTLE_MASK
    throttle_reason_names: list[str] = field(default_factory=list)
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    # Row remapping (Ampere and newer; "Not Supported" before, where pages are retired instead): a row marked
    # for remapping is spared only at the next GPU reset (pending), and a failure means no spare was left.
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    last_xid: int | None = None  # last XID seen on this GPU during the period

    @property
    def row_remap_state(self) -> int | None:
        """2 remapping failed (RMA), 1 a remap pending (reset the GPU), 0 neither, None unread."""
        if self.row_remap_failure:
            return 2
        if self.row_remap_pending:
            return 1
        return None if self.row_remap_pending is None and self.row_remap_failure is None else 0


class XidSource(StrEnum):
    """Where an XID was learned."""

    NVML = "nvml"  # the NVML event set (nvmlEventTypeXidCriticalError)
    KERNEL_LOG = "kernel_log"  # the driver's "NVRM: Xid" line in the kernel log
    NVML_GPU_IS_LOST = "nvml_gpu_is_lost"  # no XID: NVML answered NVML_ERROR_GPU_IS_LOST, read as XID 79


@dataclass
class XidEvent:
    """One XID critical error, from the NVML event set or the kernel log.

    ``gpu_index`` is the NVML index, None when the GPU is not known: an NVML handle that no longer answers,
    or a kernel-log bus id that matches no GPU the agent has seen (still reported: a node-level XID).
    """

    gpu_index: int | None
    xid: int
    source: XidSource = XidSource.NVML
    pci_bus_id: str | None = None  # as the kernel log printed it (kernel-log XIDs only)


@dataclass
class GpuSnapshot:
    """All GPUs of the instance for one period, plus the health of NVML itself."""

    nvml_ok: bool
    error: str | None = None
    gpus: list[GpuReading] = field(default_factory=list)
    xid_events: list[XidEvent] = field(default_factory=list)
    xid_supported: bool = False  # some XID source works this period (see xid_sources)
    xid_sources: list[XidSource] = field(default_factory=list)

    @property
    def lost_count(self) -> int:
        return sum(1 for g in self.gpus if g.lost)


_XidKey = tuple[int | None, int]


@dataclass(frozen=True)
class XidCarry:
    """XIDs one source reported last period that the other source had not (yet) reported.

    The driver logs an XID and posts its NVML event at the same moment, but the two are read one after the
    other, so one XID can land in consecutive periods of the two sources; a period's carry lets the next
    period recognise the other half of it.
    """

    nvml: tuple[_XidKey, ...] = ()
    kernel: tuple[_XidKey, ...] = ()


def merge_xid_events(
    nvml: list[XidEvent], kernel: list[XidEvent], carry: XidCarry
) -> tuple[list[XidEvent], XidCarry]:
    """This period's XIDs from both sources, each (GPU, xid) seen by both counted once; and the next carry.

    A kernel-log XID matching an NVML one of this period, or an unmatched one of last period, is the same
    XID; so is an NVML one matching a kernel-log XID reported last period. Matching is one to one, so a
    repeated XID still counts as often as the busier source saw it. NVML's event comes first in the result.
    """
    reported_by_kernel = Counter(carry.kernel)
    kept_nvml = [e for e in nvml if not _take(reported_by_kernel, (e.gpu_index, e.xid))]
    unmatched_nvml = Counter((e.gpu_index, e.xid) for e in kept_nvml)
    reported_by_nvml = Counter(carry.nvml)
    kept_kernel = [
        e
        for e in kernel
        if not (_take(unmatched_nvml, (e.gpu_index, e.xid)) or _take(reported_by_nvml, (e.gpu_index, e.xid)))
    ]
    next_carry = XidCarry(
        nvml=tuple(unmatched_nvml.elements()), kernel=tuple((e.gpu_index, e.xid) for e in kept_kernel)
    )
    return kept_nvml + kept_kernel, next_carry


def _take(counts: Counter[_XidKey], key: _XidKey) -> bool:
    """Use up one of ``key``'s count, if any is left."""
    if counts[key] <= 0:
        return False
    counts[key] -= 1
    return True


def describe_nvml_error(exc: BaseException) -> str:
    """``GpuIsLost: GPU is lost`` from an NVMLError, a short line from anything else."""
    return f"{type(exc).__name__.removeprefix('NVMLError_')}: {exc}"


# NVML answers these for a field the board does not have; the field is left out, the GPU is still fine.
_ABSENT_ERRORS: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_NotFound,
    pynvml.NVMLError_FunctionNotFound,
    pynvml.NVMLError_NoData,
)
# These mean the GPU itself is gone until a reset (the XID 79 "fallen off the bus" case).
_LOST_ERRORS: tuple[type[BaseException], ...] = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)
# A GPU NVML lists but cannot open or name fails with these when it is gone: the lost errors, or "Unknown
# Error" (nvidia-smi: "Unable to determine the device handle for GPU ...: Unknown Error" after XID 79).
_UNREACHABLE_ERRORS: tuple[type[BaseException], ...] = (*_LOST_ERRORS, pynvml.NVMLError_Unknown)
# These mean NVML as a whole is unusable: start over next period.
_NVML_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_Uninitialized,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_LibRmVersionMismatch,
)

_T = TypeVar("_T")


class _NvmlDown(Exception):
    """NVML stopped answering as a whole (driver unloaded mid-run)."""


_NVML_DOWN_OR_WRAPPED: tuple[type[BaseException], ...] = (_NvmlDown, *_NVML_DOWN_ERRORS)


def _optional(fn: Callable[..., _T], *args: Any) -> _T | None:
    try:
        return fn(*args)
    except _ABSENT_ERRORS:
        return None


def _handle_key(handle: Any) -> Any:
    """A key equal for every handle of one device: pynvml's handles are ctypes pointers, which compare by
    identity, so their address; any other handle (the fake's) as it is."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _FieldReader:
    """Reads one optional field of one GPU. A field the board does not have is absent; a field that fails in
    another way (NVML's "Unknown Error" for the power draw of some boards, a sensor a vGPU does not expose) is
    absent too, and its error is kept on the reading, so that one odd field does not lose every field read
    after it. A lost GPU or NVML going down still ends the whole reading."""

    def __init__(self, reading: GpuReading) -> None:
        self._reading = reading

    def __call__(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            self.absorb(exc)
            return None

    def absorb(self, exc: BaseException) -> None:
        """A field's NVML error: absent (noted unless the board simply lacks it), or raised again when the GPU
        or NVML is gone."""
        if isinstance(exc, (*_LOST_ERRORS, *_NVML_DOWN_ERRORS)):
            raise exc
        if not isinstance(exc, _ABSENT_ERRORS):
            self.note(exc)

    def note(self, exc: BaseException) -> None:
        self.note_text(describe_nvml_error(exc))

    def note_text(self, text: str) -> None:
        if self._reading.error is None:
            self._reading.error = text


def _read_identity(nvml: Nvml, handle: Any, reading: GpuReading, get: _FieldReader) -> None:
    name = get(nvml.nvmlDeviceGetName, handle)
    reading.name = _text(name) if name is not None else None
    pci = get(nvml.nvmlDeviceGetPciInfo, handle)
    reading.pci_bus_id = _text(pci.busId) if pci is not None else None


def _read_usage(nvml: Nvml, handle: Any, reading: GpuReading, get: _FieldReader) -> None:
    # Utilization is "Not Supported" on a GPU in MIG mode: the rest of the reading still stands.
    util = get(nvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        reading.util_pct = float(util.gpu)
        reading.mem_bw_util_pct = float(util.memory)
    mem = get(nvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        reading.mem_used_bytes, reading.mem_total_bytes = int(mem.used), int(mem.total)
        if mem.used > mem.total:
            # Seen with MIG enabled and on some vGPU profiles: reserved memory counted in "used" but not in
            # "total". Not a percentage of anything: left out, so that no rule reads "memory over 95 %".
            get.note_text(
                f"memory used {int(mem.used)} B exceeds total {int(mem.total)} B: usage not published"
            )
        elif mem.total:
            reading.mem_used_pct = 100.0 * mem.used / mem.total


def _read_thermal(nvml: Nvml, handle: Any, reading: GpuReading, get: _FieldReader) -> None:
    temperature = get(nvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    # the range the isolation rules read as a reading (policies.metrics.PLAUSIBLE_RANGE: 1-150 C)
    if temperature is not None and not pm.plausible(pm.GPU_TEMPERATURE_C, temperature):
        # A failed sensor answers 0 or 255 (0xFF) with NVML_SUCCESS: no GPU that runs sits at 0 C, and none
        # reads past its shutdown temperature (about 90-100 C) without switching off. Left out, so that the
        # overheat rule neither fires on nor is calmed by a reading that is not one.
        get.note_text(f"temperature sensor read {temperature} C: not a plausible reading, not published")
        temperature = None
    reading.temperature_c = float(temperature) if temperature is not None else None
    slowdown = get(nvml.nvmlDeviceGetTemperatureThreshold, handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    shutdown = get(nvml.nvmlDeviceGetTemperatureThreshold, handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    reading.temperature_slowdown_c = float(slowdown) if slowdown is not None else None
    reading.temperature_shutdown_c = float(shutdown) if shutdown is not None else None


def _read_clocks_and_power(nvml: Nvml, handle: Any, reading: GpuReading, get: _FieldReader) -> None:
    sm = get(nvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    sm_max = get(nvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
    reading.sm_clock_mhz = float(sm) if sm is not None else None
    reading.sm_clock_max_mhz = float(sm_max) if sm_max is not None else None
    if sm is not None and sm_max:
        reading.sm_clock_ratio = sm / sm_max
    # NVML reports power in milliwatts.
    power_mw = get(nvml.nvmlDeviceGetPowerUsage, handle)
    limit_mw = get(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    reading.power_w = power_mw / 1000.0 if power_mw is not None else None
    reading.power_limit_w = limit_mw / 1000.0 if limit_mw is not None else None


def _read_ecc(nvml: Nvml, handle: Any, reading: GpuReading, get: _FieldReader) -> None:
    reading.ecc_uncorrected_volatile = get(
        nvml.nvmlDeviceGetTotalEccErrors,
        handle,
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    )
    reading.ecc_corrected_volatile = get(
        nvml.nvmlDeviceGetTotalEccErrors,
        handle,
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    )
    # nvmlDeviceGetRemappedRows: (correctable rows, uncorrectable rows, isPending, failureOccurred), what
    # `nvidia-smi -q -d ROW_REMAPPER` prints as "Pending" and "Remapping Failure Occurred".
    remapped = get(nvml.nvmlDeviceGetRemappedRows, handle)
    if remapped is not None:
        _, _, pending, failure = remapped
        reading.row_remap_pending, reading.row_remap_failure = bool(pending), bool(failure)


class GpuCollector:
    """Reads every GPU once per period; survives NVML missing, GPUs lost, unsupported fields.

    With a ``kernel_log`` reader, XIDs the driver logged are merged with NVML's XID events.
    """

    def __init__(
        self,
        nvml: Nvml | None,
        kernel_log: KernelLogReader | None = None,
        falls_file: FallsFile | None = None,
    ) -> None:
        self._nvml = nvml
        self._kernel_log = kernel_log
        self._initialized = False
        self._event_set: Any = None
        self._init_error: str | None = None if nvml is not None else "NVML not available"
        # Every GPU seen since the agent started, by UUID: (index, PCI bus id) when last read.
        self._known: dict[str, tuple[int, str | None]] = {}
        self._xid_carry = XidCarry()
        # GPU index -> what counted its fall off the bus (an XID 79, or NVML's GPU_IS_LOST) since it was last
        # read whole.
        self._fall_counted: dict[int, XidSource] = {}
        # The falls an earlier run of the agent counted in this boot (``falls_file``): counted already, as
        # GPU_IS_LOST counts one, so neither NVML nor the kernel log's lookback counts them again; with the
        # bus ids they had, to place a replayed kernel log line. What was last written, to write only changes.
        self._falls_file = falls_file
        self._saved_falls: Falls = falls_file.load() if falls_file is not None else {}
        self._fall_counted.update(dict.fromkeys(self._saved_falls, XidSource.NVML_GPU_IS_LOST))
        self._fallen_bus_ids = {index: bus for index, bus in self._saved_falls.items() if bus is not None}
        # This NVML session's device handles -> NVML index, for an event whose GPU no longer tells its index.
        self._index_by_handle: dict[Any, int] = {}

    def _ensure_init(self) -> bool:
        if self._initialized:
            return True
        if self._nvml is None:
            return False
        try:
            self._nvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._init_error = describe_nvml_error(exc)
            return False
        except OSError as exc:  # a broken libnvidia-ml.so can fail in the loader itself
            self._init_error = f"NVML failed to load: {exc}"
            return False
        self._initialized = True
        self._init_error = None
        self._index_by_handle = {}
        self._register_xid_events()
        return True

    def _register_xid_events(self) -> None:
        assert self._nvml is not None
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except pynvml.NVMLError:
            self._event_set = None
            return
        registered = 0
        try:
            count = nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError:
            count = 0  # read() will report why
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                self._index_by_handle[_handle_key(handle)] = index
                nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except pynvml.NVMLError:
                # Not supported on this board, or the GPU is already lost: read the others.
                continue
        if registered:
            self._event_set = event_set
        else:
            _optional(nvml.nvmlEventSetFree, event_set)
            self._event_set = None

    def start(self) -> bool:
        """Initialize NVML and register for XID events now (``read`` does it too); False when NVML is down."""
        return self._ensure_init()

    def close(self) -> None:
        """Free the event set, shut NVML down and close the kernel log (safe to call twice)."""
        if self._kernel_log is not None:
            self._kernel_log.close()  # reopened by the next read, where it left off
        if not self._initialized or self._nvml is None:
            return
        try:
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
            self._nvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        self._initialized = False
        self._event_set = None

    def read(self) -> GpuSnapshot:
        """One reading of every GPU, plus the XID events that arrived since the last read."""
        if not self._ensure_init():
            return self._without_nvml(self._init_error)
        assert self._nvml is not None
        try:
            count = self._nvml.nvmlDeviceGetCount()
            gpus = [self._read_gpu(index) for index in range(count)]
            nvml_events = self._drain_xid_events()
        except _NVML_DOWN_OR_WRAPPED as exc:
            cause = exc.__cause__ if isinstance(exc, _NvmlDown) else exc
            self._initialized = False  # start over next period
            self._event_set = None
            return self._without_nvml(describe_nvml_error(cause or exc))
        gpus += self._vanished(gpus)
        events = self._count_falls(gpus, self._merge(nvml_events, self._kernel_xids(gpus)))
        by_index = {reading.index: reading for reading in gpus}
        for event in events:
            if event.gpu_index in by_index:
                by_index[event.gpu_index].last_xid = event.xid
        sources = self._xid_sources()
        return GpuSnapshot(
            nvml_ok=True, gpus=gpus, xid_events=events, xid_supported=bool(sources), xid_sources=sources
        )

    def _without_nvml(self, error: str | None) -> GpuSnapshot:
        """NVML is down: no readings, but the kernel log's XIDs (mapped by the bus ids seen before)."""
        events = self._count_falls([], self._merge([], self._kernel_xids([])))
        sources = self._xid_sources()
        return GpuSnapshot(
            nvml_ok=False, error=error, xid_events=events, xid_supported=bool(sources), xid_sources=sources
        )

    def _xid_sources(self) -> list[XidSource]:
        sources = [XidSource.NVML] if self._event_set is not None else []
        if self._kernel_log is not None and self._kernel_log.available:
            sources.append(XidSource.KERNEL_LOG)
        return sources

    def _merge(self, nvml_events: list[XidEvent], kernel_events: list[XidEvent]) -> list[XidEvent]:
        events, self._xid_carry = merge_xid_events(nvml_events, kernel_events, self._xid_carry)
        return events

    def _count_falls(self, gpus: list[GpuReading], events: list[XidEvent]) -> list[XidEvent]:
        """``events`` plus an XID 79 for each GPU NVML answers GPU_IS_LOST for, one per fall off the bus.

        A fall is counted by the first of: an XID 79 of that GPU (from either source), or NVML's GPU_IS_LOST.
        It lasts until the GPU is read whole again (a reset), so a GPU read lost after its XID 79 (in the same
        period, or periods later: NVML was down meanwhile, or the XID came between the GPU's reading and the
        events' drain) adds nothing, and an XID 79 arriving after GPU_IS_LOST counted the fall (a kernel log
        that became readable, its lookback replaying the line) is dropped. XID 79s counted by nothing else
        are all kept, as before.
        """
        for reading in gpus:
            if reading.uuid is not None and not reading.lost:
                self._fall_counted.pop(reading.index, None)
        out: list[XidEvent] = []
        for event in events:
            if event.xid == XID_FALLEN_OFF_THE_BUS and event.gpu_index is not None:
                if self._fall_counted.get(event.gpu_index) is XidSource.NVML_GPU_IS_LOST:
                    continue
                self._fall_counted[event.gpu_index] = event.source
            out.append(event)
        for reading in gpus:
            if reading.gpu_is_lost and reading.index not in self._fall_counted:
                self._fall_counted[reading.index] = XidSource.NVML_GPU_IS_LOST
                out.append(XidEvent(reading.index, XID_FALLEN_OFF_THE_BUS, XidSource.NVML_GPU_IS_LOST))
        self._save_falls(gpus)
        return out

    def _save_falls(self, gpus: list[GpuReading]) -> None:
        """Keep the counted falls for a restarted agent (``falls_file``), when they changed."""
        if self._falls_file is None:
            return
        bus_ids: dict[int, str | None] = dict(self._fallen_bus_ids)
        bus_ids.update((index, pci) for index, pci in self._known.values() if pci is not None)
        bus_ids.update((r.index, r.pci_bus_id) for r in gpus if r.pci_bus_id is not None)
        falls = {index: bus_ids.get(index) for index in self._fall_counted}
        if falls != self._saved_falls and self._falls_file.save(falls):
            self._saved_falls = falls

    def _kernel_xids(self, gpus: list[GpuReading]) -> list[XidEvent]:
        if self._kernel_log is None:
            return []
        records = self._kernel_log.read()
        if not records:
            return []
        index_by_bus = self._index_by_bus_id(gpus)
        return [_kernel_xid_event(record, index_by_bus) for record in records]

    def _index_by_bus_id(self, gpus: list[GpuReading]) -> dict[str, int]:
        """GPU index by normalised PCI bus id: this period's readings, else the last reading of each GPU
        seen (a GPU lost after XID 79 no longer answers with its bus id), else the bus id an earlier run of
        the agent kept for a GPU whose fall it counted."""
        out: dict[str, int] = {}
        readings: list[tuple[int, str | None]] = list(self._fallen_bus_ids.items())  # known to an earlier run
        readings += [(index, pci) for index, pci in self._known.values()]
        readings += [(r.index, r.pci_bus_id) for r in gpus]  # later wins: the current index
        for index, pci in readings:
            bus_id = normalize_pci_bus_id(pci) if pci is not None else None
            if bus_id is not None:
                out[bus_id] = index
        return out

    def _vanished(self, gpus: list[GpuReading]) -> list[GpuReading]:
        """GPUs seen before that NVML no longer lists, as lost readings.

        A GPU that fell off the bus is still listed (and answers GpuIsLost) until NVML is initialised again;
        after that (the agent re-initialises when the driver stops answering) the driver may leave it out, and
        the instance would look healthy with one GPU fewer. The GPUs still listed may be renumbered then, so
        a vanished GPU keeps its old index only when no listed GPU has taken it.
        """
        for reading in gpus:
            if reading.uuid is not None:
                self._known[reading.uuid] = (reading.index, reading.pci_bus_id)
        listed = {r.uuid for r in gpus if r.uuid is not None}
        unnamed = {r.index for r in gpus if r.uuid is None}  # listed but unreadable: already reported
        taken = {r.index for r in gpus}
        out: list[GpuReading] = []
        for uuid, (index, pci) in self._known.items():
            if uuid in listed or index in unnamed:
                continue
            if index in taken:
                index = max(taken) + 1
            taken.add(index)
            out.append(
                GpuReading(
                    index=index, uuid=uuid, pci_bus_id=pci, lost=True, error="no longer listed by NVML"
                )
            )
        return out

    def _read_gpu(self, index: int) -> GpuReading:
        assert self._nvml is not None
        nvml = self._nvml
        reading = GpuReading(index=index)
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._index_by_handle[_handle_key(handle)] = index
            reading.uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except _UNREACHABLE_ERRORS as exc:
            # nvidia-smi's "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error": the
            # state of a GPU after XID 79 on many drivers, where NVML answers Unknown rather than GpuIsLost.
            reading.lost = True
            reading.gpu_is_lost = isinstance(exc, pynvml.NVMLError_GpuIsLost)
            reading.error = describe_nvml_error(exc)
            return reading
        except _NVML_DOWN_ERRORS as exc:
            raise _NvmlDown() from exc
        except pynvml.NVMLError as exc:
            reading.error = describe_nvml_error(exc)
            return reading
        get = _FieldReader(reading)
        try:
            _read_identity(nvml, handle, reading, get)
            _read_usage(nvml, handle, reading, get)
            _read_thermal(nvml, handle, reading, get)
            _read_clocks_and_power(nvml, handle, reading, get)
            raw = self._clock_event_reasons(handle, get)
            if raw is not None:
                reading.clock_event_reasons_raw = int(raw)
                reading.throttle_reasons = int(raw) & THROTTLE_MASK
                reading.throttle_reason_names = decode_clock_event_reasons(int(raw))
            _read_ecc(nvml, handle, reading, get)
        except _LOST_ERRORS as exc:
            reading.lost = True
            reading.gpu_is_lost = isinstance(exc, pynvml.NVMLError_GpuIsLost)
            reading.error = describe_nvml_error(exc)
        except _NVML_DOWN_ERRORS as exc:
            raise _NvmlDown() from exc
        return reading

    def _clock_event_reasons(self, handle: Any, get: _FieldReader) -> int | None:
        assert self._nvml is not None
        try:
            return self._nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        except (pynvml.NVMLError_FunctionNotFound, AttributeError):
            # Drivers before the "clocks event" rename only have the throttle-reasons entry point.
            return get(self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        except pynvml.NVMLError as exc:
            get.absorb(exc)
            return None

    def _drain_xid_events(self) -> list[XidEvent]:
        if self._event_set is None:
            return []
        assert self._nvml is not None
        events: list[XidEvent] = []
        for _ in range(MAX_XID_EVENTS_PER_PERIOD):
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._event_set, 0)  # never block the period
            except pynvml.NVMLError_Timeout:
                break
            except _NVML_DOWN_ERRORS:
                raise
            except pynvml.NVMLError:
                break
            if not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
                continue
            xid = int(data.eventData)
            if xid == XID_RECOVERY_ACTION_CHANGED and self._recovery_action(data.device) == 0:
                # The event carries only the code; the kernel log's line says "to 0x0 (None)" for a GPU
                # that recovered. NVML's own field says the same now: nothing to act on.
                continue
            events.append(XidEvent(gpu_index=self._index_of(data.device), xid=xid))
        return events

    def _recovery_action(self, handle: Any) -> int | None:
        """NVML's NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvmlGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node
        reboot, 3 drain P2P, 4 drain and reset), None where the driver does not have it (before r550)."""
        assert self._nvml is not None
        try:
            (value,) = self._nvml.nvmlDeviceGetFieldValues(
                handle, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]
            )
        except (pynvml.NVMLError, ValueError):
            return None
        if int(value.nvmlReturn) != pynvml.NVML_SUCCESS:
            return None
        return int(value.value.uiVal)

    def _index_of(self, handle: Any) -> int | None:
        """The event's GPU. nvmlDeviceGetIndex answers GPU_IS_LOST for a GPU off the bus (nvml.h), the one an
        XID 79 comes from: the index its handle had when the GPU was read, else None."""
        assert self._nvml is not None
        try:
            return int(self._nvml.nvmlDeviceGetIndex(handle))
        except pynvml.NVMLError:
            return self._index_by_handle.get(_handle_key(handle))


def _kernel_xid_event(record: KernelXid, index_by_bus: dict[str, int]) -> XidEvent:
    bus_id = normalize_pci_bus_id(record.pci_bus_id)
    return XidEvent(
        gpu_index=index_by_bus.get(bus_id) if bus_id is not None else None,
        xid=record.xid,
        source=XidSource.KERNEL_LOG,
        pci_bus_id=record.pci_bus_id,
    )
