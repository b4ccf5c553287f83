"""GpuCollector against the fake NVML: readings, throttle decoding, XID events, lost GPUs, NVML missing."""

from __future__ import annotations

import pynvml
import pytest

from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.nvml import THROTTLE_MASK, GpuCollector, decode_clock_event_reasons

HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
SW_THERMAL = pynvml.nvmlClocksEventReasonSwThermalSlowdown
SW_POWER = pynvml.nvmlClocksEventReasonSwPowerCap
HW_SLOWDOWN = pynvml.nvmlClocksEventReasonHwSlowdown
HW_POWER_BRAKE = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
IDLE = pynvml.nvmlClocksEventReasonGpuIdle


def test_the_real_pynvml_module_satisfies_the_protocol_names():
    from fleet.agent.nvml import Nvml

    wanted = [name for name in vars(Nvml) if name.startswith("nvml")]
    assert wanted and all(callable(getattr(pynvml, name, None)) for name in wanted)


def test_readings_convert_nvml_units():
    gpu = FakeGpu(
        power_mw=412_500,
        power_limit_mw=500_000,
        mem_used_bytes=48 * 1024**3,
        mem_total_bytes=96 * 1024**3,
        sm_clock_mhz=1485,
        sm_clock_max_mhz=1980,
    )
    snap = GpuCollector(FakeNvml([gpu])).read()
    reading = snap.gpus[0]
    assert snap.nvml_ok
    assert reading.power_w == pytest.approx(412.5)
    assert reading.power_limit_w == pytest.approx(500.0)
    assert reading.mem_used_pct == pytest.approx(50.0)
    assert reading.sm_clock_ratio == pytest.approx(1485 / 1980)


def test_temperature_and_its_thresholds_are_read():
    reading = GpuCollector(FakeNvml([FakeGpu(temperature_c=91, slowdown_c=87, shutdown_c=92)])).read().gpus[0]
    assert (reading.temperature_c, reading.temperature_slowdown_c, reading.temperature_shutdown_c) == (
        91,
        87,
        92,
    )


def test_memory_bandwidth_utilization_comes_from_utilization_memory():
    reading = GpuCollector(FakeNvml([FakeGpu(util_pct=100, mem_util_pct=93)])).read().gpus[0]
    assert (reading.util_pct, reading.mem_bw_util_pct) == (100.0, 93.0)


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (HW_THERMAL, ["hw_thermal_slowdown"]),
        (SW_THERMAL | SW_POWER, ["sw_power_cap", "sw_thermal_slowdown"]),
        (HW_SLOWDOWN | HW_POWER_BRAKE, ["hw_slowdown", "hw_power_brake_slowdown"]),
        (IDLE, ["gpu_idle"]),
        (0, []),
    ],
)
def test_clock_event_reasons_decode_to_names(mask, names):
    assert decode_clock_event_reasons(mask) == names


def test_throttle_reasons_keep_distress_bits_and_raw_keeps_all():
    reading = GpuCollector(FakeNvml([FakeGpu(clock_event_reasons=IDLE | HW_THERMAL)])).read().gpus[0]
    assert reading.clock_event_reasons_raw == IDLE | HW_THERMAL
    assert reading.throttle_reasons == HW_THERMAL


def test_throttle_mask_is_the_five_slowdown_reasons_from_nvml():
    assert THROTTLE_MASK == SW_POWER | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE


def test_legacy_driver_falls_back_to_throttle_reasons_call():
    reading = (
        GpuCollector(FakeNvml([FakeGpu(clock_event_reasons=SW_POWER, legacy_driver=True)])).read().gpus[0]
    )
    assert reading.throttle_reasons == SW_POWER


def test_ecc_volatile_counts_are_read():
    reading = GpuCollector(FakeNvml([FakeGpu(ecc_uncorrected=2, ecc_corrected=17)])).read().gpus[0]
    assert (reading.ecc_uncorrected_volatile, reading.ecc_corrected_volatile) == (2, 17)


def test_unsupported_fields_are_absent_not_errors():
    gpu = FakeGpu(ecc_uncorrected=None, ecc_corrected=None, slowdown_c=None, power_limit_mw=None)
    reading = GpuCollector(FakeNvml([gpu])).read().gpus[0]
    assert reading.error is None and not reading.lost
    assert reading.ecc_uncorrected_volatile is None and reading.temperature_slowdown_c is None
    assert reading.power_limit_w is None and reading.power_w is not None


def test_mig_mode_gpu_without_utilization_still_reports_the_rest():
    reading = GpuCollector(FakeNvml([FakeGpu(mig_mode=True, temperature_c=66)])).read().gpus[0]
    assert reading.util_pct is None and reading.error is None
    assert reading.temperature_c == 66 and reading.mem_used_pct is not None


def test_xid_events_are_drained_once_with_their_gpu():
    gpus = [FakeGpu(), FakeGpu()]
    collector = GpuCollector(FakeNvml(gpus))
    collector.start()
    gpus[1].push_xid(48)
    gpus[1].push_xid(63)
    first = collector.read()
    assert [(e.gpu_index, e.xid) for e in first.xid_events] == [(1, 48), (1, 63)]
    assert first.gpus[1].last_xid == 63 and first.gpus[0].last_xid is None
    assert collector.read().xid_events == []


def test_xid_unsupported_board_still_reads():
    snap = GpuCollector(FakeNvml([FakeGpu(xid_supported=False)])).read()
    assert snap.nvml_ok and not snap.xid_supported and snap.gpus[0].util_pct is not None


def test_gpu_lost_mid_run_is_reported_and_others_still_read():
    gpus = [FakeGpu(temperature_c=60), FakeGpu(temperature_c=61)]
    collector = GpuCollector(FakeNvml(gpus))
    assert collector.read().lost_count == 0
    gpus[0].lose()
    snap = collector.read()
    assert snap.nvml_ok
    assert snap.gpus[0].lost and "GpuIsLost" in (snap.gpus[0].error or "")
    assert snap.gpus[1].temperature_c == 61 and not snap.gpus[1].lost
    assert [e.xid for e in snap.xid_events] == [79]


def test_nvml_missing_is_reported_not_raised():
    snap = GpuCollector(FakeNvml(library_missing=True)).read()
    assert not snap.nvml_ok
    assert "LibraryNotFound" in (snap.error or "")
    assert snap.gpus == []


def test_nvml_missing_is_retried_each_period_and_recovers():
    nvml = FakeNvml(library_missing=True)
    collector = GpuCollector(nvml)
    assert not collector.read().nvml_ok
    nvml.library_missing = False  # the driver got installed
    assert collector.read().nvml_ok
    assert nvml.init_calls == 2


def test_driver_unloaded_mid_run_reports_and_reinitializes():
    nvml = FakeNvml([FakeGpu()])
    collector = GpuCollector(nvml)
    assert collector.read().nvml_ok
    nvml.driver_unloaded = True
    down = collector.read()
    assert not down.nvml_ok and "DriverNotLoaded" in (down.error or "")
    nvml.driver_unloaded = False
    assert collector.read().nvml_ok


def test_no_nvml_object_at_all_is_reported():
    snap = GpuCollector(None).read()
    assert not snap.nvml_ok and snap.error


def test_real_nvml_without_a_driver_reports_instead_of_raising():
    # This machine has no NVIDIA driver: the real pynvml fails to load its library, and that is a reading.
    snap = GpuCollector(pynvml).read()  # type: ignore[arg-type]
    if snap.nvml_ok:
        pytest.skip("an NVIDIA driver is present here; this test is about machines without one")
    assert snap.error


@pytest.mark.parametrize("bogus_c", [0, 255])
def test_a_failed_temperature_sensor_is_marked_unread_not_published(bogus_c):
    # NVML answers NVML_SUCCESS with 0 or 255 (0xFF) from a sensor that failed: no reading at all
    snap = GpuCollector(FakeNvml([FakeGpu(temperature_c=bogus_c), FakeGpu(temperature_c=71)])).read()
    broken, fine = snap.gpus
    assert broken.temperature_c is None and f"{bogus_c} C" in (broken.error or "")
    assert fine.temperature_c == 71.0 and fine.error is None
    assert broken.util_pct is not None and broken.power_w is not None  # the rest of the reading stands


def test_a_real_overheat_is_still_read():
    assert GpuCollector(FakeNvml([FakeGpu(temperature_c=97)])).read().gpus[0].temperature_c == 97.0


def test_memory_used_over_total_publishes_no_percentage():
    # MIG and some vGPU profiles count reserved memory in "used" but not in "total"
    gpu = FakeGpu(mem_total_bytes=80 * 1024**3, mem_used_bytes=82 * 1024**3)
    reading = GpuCollector(FakeNvml([gpu])).read().gpus[0]
    assert reading.mem_used_pct is None and "exceeds total" in (reading.error or "")
    assert reading.mem_used_bytes == 82 * 1024**3 and reading.mem_total_bytes == 80 * 1024**3


class _LostMidRead(FakeNvml):
    """The GPU falls off the bus between two calls of one reading (after its temperature was read)."""

    def nvmlDeviceGetTemperature(self, handle, sensor):
        value = super().nvmlDeviceGetTemperature(handle, sensor)
        self.gpus[handle.index].lose()
        return value


def test_a_gpu_lost_in_the_middle_of_its_reading_is_lost_and_the_next_gpu_is_read():
    snap = GpuCollector(_LostMidRead([FakeGpu(), FakeGpu()])).read()
    assert [g.lost for g in snap.gpus] == [True, True]  # the fake loses each GPU as its temperature is read
    assert all("GpuIsLost" in (g.error or "") for g in snap.gpus)


@pytest.mark.parametrize(
    ("pending", "failure", "state"),
    [(False, False, 0), (True, False, 1), (False, True, 2), (True, True, 2), (None, None, None)],
)
def test_row_remapping_is_read_as_nvidia_smi_shows_it(pending, failure, state):
    # nvmlDeviceGetRemappedRows; None: "Not Supported" (a T4 retires pages instead), which is no error
    reading = GpuCollector(FakeNvml([FakeGpu(row_remap_pending=pending, row_remap_failure=failure)])).read()
    gpu = reading.gpus[0]
    assert (gpu.row_remap_pending, gpu.row_remap_failure, gpu.row_remap_state) == (pending, failure, state)
    assert gpu.error is None


@pytest.mark.parametrize(("recovery_action", "reported"), [(0, []), (2, [154]), (1, [154]), (None, [154])])
def test_an_nvml_xid_154_is_dropped_only_when_nvml_says_no_recovery_is_needed(recovery_action, reported):
    # NVML's XID event carries only the code; NVML_FI_DEV_GET_GPU_RECOVERY_ACTION says what is needed now
    # (None where the driver predates the field: the 154 is reported, the safe side)
    gpu = FakeGpu(recovery_action=recovery_action)
    collector = GpuCollector(FakeNvml([gpu]))
    collector.read()
    gpu.push_xid(154)
    assert [e.xid for e in collector.read().xid_events] == reported


def _falls(snap) -> list[tuple[int | None, int, str]]:
    return [(e.gpu_index, e.xid, str(e.source)) for e in snap.xid_events]


def test_a_gpu_nvml_answers_gpu_is_lost_for_reads_as_xid_79_once_without_any_xid_event():
    # it fell before the agent registered for events, or on a vGPU that delivers none: NVML's
    # NVML_ERROR_GPU_IS_LOST (15) is then the only word of it, and must raise the same signal as XID 79
    gpus = [FakeGpu(), FakeGpu()]
    collector = GpuCollector(FakeNvml(gpus))
    collector.read()
    gpus[1].lose(with_xid=False)
    snap = collector.read()
    assert snap.gpus[1].lost and snap.gpus[1].gpu_is_lost
    assert _falls(snap) == [(1, 79, "nvml_gpu_is_lost")]
    assert snap.gpus[1].last_xid == 79 and snap.gpus[0].last_xid is None
    assert collector.read().xid_events == []  # still lost: the same fall


def test_a_gpu_lost_with_its_xid_79_counts_once_whichever_comes_first():
    gpus = [FakeGpu(), FakeGpu(), FakeGpu()]
    collector = GpuCollector(FakeNvml(gpus))
    collector.read()
    gpus[0].lose()  # the event and the lost reading in one period: the event counts
    gpus[1].push_xid(79)  # the event a period before NVML reads the GPU lost
    assert _falls(collector.read()) == [(0, 79, "nvml"), (1, 79, "nvml")]
    gpus[1].lose(with_xid=False)
    gpus[2].lose(with_xid=False)  # the lost reading a period before the event
    assert _falls(collector.read()) == [(2, 79, "nvml_gpu_is_lost")]
    gpus[2].push_xid(79)
    assert collector.read().xid_events == []


def test_a_gpu_reset_and_lost_again_is_a_second_fall():
    gpu = FakeGpu()
    collector = GpuCollector(FakeNvml([gpu]))
    gpu.lose(with_xid=False)
    assert [e.xid for e in collector.read().xid_events] == [79]
    gpu.is_lost = False  # reset: read whole again
    assert collector.read().xid_events == []
    gpu.lose(with_xid=False)
    assert [e.xid for e in collector.read().xid_events] == [79]


class _ResetRequired(FakeNvml):
    """NVML_ERROR_RESET_REQUIRED for GPU 0: it needs a reset, which is not a fall off the bus."""

    def nvmlDeviceGetUUID(self, handle):
        if handle.index == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_RESET_REQUIRED)
        return super().nvmlDeviceGetUUID(handle)


def test_a_gpu_that_needs_a_reset_is_lost_but_no_xid_79():
    snap = GpuCollector(_ResetRequired([FakeGpu()])).read()
    assert snap.gpus[0].lost and not snap.gpus[0].gpu_is_lost and snap.xid_events == []


def test_the_xid_79_of_a_gpu_that_no_longer_tells_its_index_is_that_gpus():
    # nvml.h: nvmlDeviceGetIndex answers GPU_IS_LOST for a GPU off the bus, the very GPU an XID 79 is about
    gpus = [FakeGpu(), FakeGpu()]
    collector = GpuCollector(FakeNvml(gpus))
    collector.read()
    gpus[1].lose()
    snap = collector.read()
    assert _falls(snap) == [(1, 79, "nvml")] and snap.gpus[1].last_xid == 79


def test_two_pynvml_handles_of_one_device_are_one_gpu():
    # pynvml's handles are ctypes pointers, a new object per call and per event, equal only by address
    import ctypes

    from fleet.agent.nvml import _handle_key

    device = pynvml.struct_c_nvmlDevice_t()
    first = pynvml.c_nvmlDevice_t(device)
    event = pynvml.c_nvmlEventData_t()
    event.device = ctypes.cast(ctypes.addressof(device), pynvml.c_nvmlDevice_t)
    assert first != event.device and _handle_key(first) == _handle_key(event.device)
    assert _handle_key(pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t())) != _handle_key(first)
