"""XIDs from the kernel log: parsing, the kmsg and text sources, GPU mapping, the merge with NVML's events,
and the agent end to end. A fake /dev/kmsg device and temp files stand in for the kernel, never the real
one."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from agent_doubles import RecordingSink

from fleet.agent.clock import ManualAgentClock
from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.kmsg import (
    KernelLogReader,
    KmsgSource,
    TextLogSource,
    normalize_pci_bus_id,
    open_kernel_log,
    parse_kmsg_record,
    parse_lost_gpu_message,
    parse_text_line,
    parse_xid_message,
)
from fleet.agent.nvml import GpuCollector, XidCarry, XidEvent, XidSource, merge_xid_events
from fleet.agent.publish import CmsPublisher
from fleet.agent.run import Agent, AgentConfig
from fleet.agent.sample import instance_values
from fleet.cli import main

INSTANCE = "i-bp1kmsg000000001"
# ManualAgentClock's defaults: 2026-01-01T00:00:00Z, 1000 s since boot.
WALL_S = 1_767_225_600.0
MONO_S = 1000.0
LOOKBACK_S = 900.0


# -- helpers -------------------------------------------------------------------------------------------------
class FakeKmsg:
    """The kernel's ring buffer as /dev/kmsg shows it: every open reads from the oldest record, one record per
    read, BlockingIOError (EAGAIN) at the end; a BrokenPipeError item stands for records overwritten there."""

    def __init__(self) -> None:
        self.items: list[bytes | OSError] = []
        self.refuse: OSError | None = None
        self.opens = 0

    def log(self, seq: int, message: str, ts_s: float, prio: int = 4, dictionary: str = "") -> None:
        self.items.append(f"{prio},{seq},{int(ts_s * 1e6)},-;{message}\n{dictionary}".encode())

    def overwrite(self) -> None:
        self.items.append(BrokenPipeError(errno.EPIPE, "Broken pipe"))

    def open(self, path: str) -> _FakeKmsgDevice:
        if self.refuse is not None:
            raise self.refuse
        self.opens += 1
        return _FakeKmsgDevice(self)


class _FakeKmsgDevice:
    def __init__(self, kmsg: FakeKmsg) -> None:
        self._kmsg = kmsg
        self._pos = 0
        self.reads = 0

    def read(self, size: int) -> bytes:
        self.reads += 1
        if self._pos >= len(self._kmsg.items):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        item = self._kmsg.items[self._pos]
        self._pos += 1
        if isinstance(item, OSError):
            raise item
        return item

    def close(self) -> None:
        pass


def xid_message(bus: str, code: int) -> str:
    return f"NVRM: Xid (PCI:{bus}): {code}, pid=2201, name=python3, Graphics SM Warp Exception"


def kmsg_reader(kmsg: FakeKmsg, clock: ManualAgentClock | None = None, **kw) -> KernelLogReader:
    source = KmsgSource("/dev/kmsg", open_device=kmsg.open)
    return KernelLogReader(source, clock=clock or ManualAgentClock(), lookback_s=LOOKBACK_S, **kw)


def text_reader(path: Path, clock: ManualAgentClock | None = None, **kw) -> KernelLogReader:
    source = TextLogSource(str(path), **{k: kw.pop(k) for k in ("tail_bytes", "chunk_bytes") if k in kw})
    return KernelLogReader(source, clock=clock or ManualAgentClock(), lookback_s=LOOKBACK_S, **kw)


def append(path: Path, *lines: str) -> None:
    with path.open("a") as f:
        f.writelines(line + "\n" for line in lines)


def codes(xids) -> list[int]:
    return [x.xid for x in xids]


def iso(wall_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(wall_s))


@pytest.fixture
def log_file(tmp_path) -> Path:
    path = tmp_path / "kern.log"
    path.write_text("")
    return path


# -- parsing -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "NVRM: Xid (PCI:0000:00:07): 79, pid=1234, name=python3, GPU has fallen off the bus.",
            ("0000:00:07", 79),
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit",
            ("0000:3b:00", 48),
        ),
        (
            "NVRM: Xid (PCI:0000:00:07.0): 13, pid=2201, name=python3, Graphics SM Warp Exception",
            ("0000:00:07.0", 13),
        ),
        ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", ("0000:44:00", 79)),  # no pid
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", ("0000:03:00", 14)),  # drivers before "PCI:"
        ("NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 08", ("0018:01:00", 149)),
        (  # GSP firmware (r525 and later), the name field present
            "NVRM: Xid (PCI:0000:00:07.0): 119, pid=18451, name=python3, Timeout after 6s of waiting for RPC "
            "response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
            ("0000:00:07.0", 119),
        ),
        (  # the driver's recovery action (r550 and later): a reboot is needed
            "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 "
            "(Node Reboot Required)",
            ("0000:01:00", 154),
        ),
        (
            "NVRM: Xid (PCI:0000:0d:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
            "(GPU Reset Required)",
            ("0000:0d:00", 154),
        ),
        (
            "NVRM: Xid (PCI:0000:b3:00): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu "
            "to activate.",
            ("0000:b3:00", 63),
        ),
        (
            "NVRM: Xid (PCI:0000:b3:00): 94, pid=3312, name=python3, Contained: CE User Channel (0x9). "
            "RST: No, D-RST: No",
            ("0000:b3:00", 94),
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 45, pid=2534, name=python3, Ch 00000010", ("0000:3b:00", 45)),
    ],
)
def test_xid_messages_of_every_driver_generation_parse(message, expected):
    assert parse_xid_message(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: GPU at PCI:0000:00:07: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7",
        "nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, ingress invalid command",
        "NVRM: Xid (PCI:0000:00:07): abc, pid=1",
        "NVRM: Xid (PCI:zz:00:07): 79, pid=1",
        "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) has fallen off the bus",
        "",
        # the GPU recovered (a reset completed): the driver says it needs nothing any more
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 "
        "(None)",
    ],
)
def test_messages_that_are_not_xids_are_ignored(message):
    assert parse_xid_message(message) is None


LOST_AT_RUN_TIME = "NVRM: GPU 0000:00:08.0: GPU has fallen off the bus."


def lost_at_probe(bus: str, sep: str) -> str:
    return (
        f"NVRM: The NVIDIA GPU {bus}{sep}NVRM: (PCI ID: 10de:2330) installed in this system has{sep}"
        "NVRM: fallen off the bus and is not responding to commands."
    )


@pytest.mark.parametrize(
    ("message", "bus"),
    [
        (LOST_AT_RUN_TIME, "0000:00:08.0"),  # osHandleGpuLost, after its XID 79 line
        # the probe's record, as /dev/kmsg escapes its newlines
        (lost_at_probe("0000:b3:00.0", "\\x0a"), "0000:b3:00.0"),
        (lost_at_probe("0000:b3:00.0", "#012"), "0000:b3:00.0"),  # as rsyslog escapes it
        # the XID line itself is an XID (parse_xid_message), not a second lost GPU
        ("NVRM: Xid (PCI:0000:00:08): 79, pid=1, name=python3, GPU has fallen off the bus.", None),
        # any failed initialisation (an unsupported GPU, a firmware that did not boot): not a lost GPU
        ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)", None),
        # info level, printed only with debug logging; nvidia-smi's "GPU is lost" is not the kernel's
        ("NVRM: GPU 0000:01:00.0: GPU is lost, skipping nv_pci_probe", None),
        ("NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) has fallen off the bus", None),
    ],
)
def test_the_drivers_lost_gpu_words_name_the_gpu_and_nothing_else_does(message, bus):
    assert parse_lost_gpu_message(message) == bus


def test_kmsg_record_keeps_the_first_line_and_drops_the_dictionary_lines():
    raw = (
        b"4,1203,5123456789,-;NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, fallen off\n"
        b" SUBSYSTEM=pci\n"
        b" DEVICE=+pci:0000:00:07.0\n"
    )
    record = parse_kmsg_record(raw)
    assert record is not None
    assert (record.facility, record.sequence, record.kernel_time_s) == (0, 1203, 5123.456789)
    assert record.message == "NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, fallen off"


@pytest.mark.parametrize(
    ("raw", "sequence", "facility"),
    [
        (b"6,173,0,-,caller=T1;NVRM: Xid (PCI:0000:00:07): 13, x\n", 173, 0),  # fields after the flags
        (b"5,0,0;Linux version 3.4.0\n", 0, 0),  # kernels before the flags field
        (b"12,99,1000,-;user space wrote this\n", 99, 1),  # facility LOG_USER
    ],
)
def test_kmsg_record_headers_of_every_kernel_parse(raw, sequence, facility):
    record = parse_kmsg_record(raw)
    assert record is not None and (record.sequence, record.facility) == (sequence, facility)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"garbage without a header\n",
        b"4,x,1,-;message\n",
        b"4,1,2,-message without a semicolon\n",
        b"\xff\xfe;",
    ],
)
def test_malformed_kmsg_records_are_none(raw):
    assert parse_kmsg_record(raw) is None


@pytest.mark.parametrize(
    ("line", "kernel_time_s", "wall_time_s"),
    [
        ("[12345.678901] NVRM: Xid (PCI:0000:00:07): 79, pid=1, x", 12345.678901, None),  # dmesg
        ("[Thu Jan  1 00:00:00 2026] NVRM: Xid (PCI:0000:00:07): 79, x", None, None),  # dmesg -T
        ("Jan 01 00:00:00 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 79, x", None, None),  # journalctl -k
        (
            "[  812.000001] gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 79, x",
            812.000001,
            None,
        ),  # -o short-monotonic
        (
            "2026-01-01T00:00:00+0000 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 79, x",
            None,
            WALL_S,
        ),  # short-iso
        (
            "Jan  1 00:00:00 gpu-node kernel: [ 99.5] NVRM: Xid (PCI:0000:00:07): 79, x",
            99.5,
            None,
        ),  # kern.log
        (
            "2026-01-01T00:00:00.250000+00:00 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 79, x",
            None,
            WALL_S + 0.25,
        ),
        (
            "2026-01-01T00:00:00,000000+00:00 NVRM: Xid (PCI:0000:00:07): 79, x",
            None,
            WALL_S,
        ),  # dmesg --time-format iso
        (
            "Jan 01 00:00:00.123456 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 79, x",
            None,
            None,
        ),  # journalctl -k -o short-precise (no year: no wall time)
    ],
)
def test_text_lines_of_every_log_tool_parse_with_their_stamps(line, kernel_time_s, wall_time_s):
    found = parse_text_line(line)
    assert found is not None and (found.pci_bus_id, found.xid) == ("0000:00:07", 79)
    assert found.kernel_time_s == kernel_time_s
    assert found.wall_time_s == wall_time_s


def test_a_text_line_a_program_logged_is_not_an_xid():
    assert (
        parse_text_line("Jan 01 00:00:00 gpu-node python3[4242]: NVRM: Xid (PCI:0000:00:07): 79, x") is None
    )


# -- PCI bus ids ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("00000000:00:07.0", "0000:00:07.0"),  # NVML busId
        ("0000:00:07.0", "0000:00:07.0"),  # NVML busIdLegacy, newer drivers' kernel log
        ("0000:00:07", "0000:00:07.0"),  # older drivers' kernel log: no function
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00", "0000:3b:00.0"),
        ("PCI:0000:3b:00", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("00010000:01:00.0", "10000:01:00.0"),  # a VMD domain wider than 16 bits
        ("10000:01:00", "10000:01:00.0"),
    ],
)
def test_bus_ids_of_nvml_and_the_kernel_normalise_to_one_form(text, normal):
    assert normalize_pci_bus_id(text) == normal


@pytest.mark.parametrize("text", ["", "GPU-1234", "0000:3b", "0000:3b:00.9", "x0000:3b:00"])
def test_text_that_is_no_bus_id_normalises_to_none(text):
    assert normalize_pci_bus_id(text) is None


# -- /dev/kmsg -----------------------------------------------------------------------------------------------
def test_kmsg_reads_every_record_until_eagain_and_each_once():
    kmsg = FakeKmsg()
    kmsg.log(1, "Linux version 6.8.0", 0.0)
    kmsg.log(2, xid_message("0000:00:07", 13), 990.0)
    reader = kmsg_reader(kmsg)
    assert codes(reader.read()) == [13]
    assert reader.read() == []
    kmsg.log(
        3, xid_message("0000:00:08", 48), 1001.0, dictionary=" SUBSYSTEM=pci\n DEVICE=+pci:0000:00:08.0\n"
    )
    xids = reader.read()
    assert [(x.pci_bus_id, x.xid, x.sequence, x.kernel_time_s) for x in xids] == [
        ("0000:00:08", 48, 3, 1001.0)
    ]
    assert reader.available and reader.error is None


def test_kmsg_reopened_after_an_error_replays_nothing_by_sequence():
    kmsg = FakeKmsg()
    kmsg.log(1, xid_message("0000:00:07", 13), 990.0)
    reader = kmsg_reader(kmsg)
    assert codes(reader.read()) == [13]
    kmsg.items.append(OSError(errno.EIO, "Input/output error"))
    assert reader.read() == [] and not reader.available
    kmsg.items.pop()
    kmsg.log(2, xid_message("0000:00:07", 31), 1001.0)
    assert codes(reader.read()) == [31]  # the reopened device starts at record 1 again
    assert kmsg.opens == 2


def test_kmsg_overwritten_records_are_noted_and_reading_goes_on(caplog):
    kmsg = FakeKmsg()
    kmsg.log(7, xid_message("0000:00:07", 13), 990.0)
    kmsg.overwrite()
    kmsg.log(40, xid_message("0000:00:07", 79), 995.0)
    reader = kmsg_reader(kmsg)
    with caplog.at_level(logging.WARNING, logger="fleet.agent.kmsg"):
        assert codes(reader.read()) == [13, 79]
    assert reader.overwritten_total == 1 and reader.available
    assert any("overwritten" in r.getMessage() for r in caplog.records)


def test_kmsg_records_user_space_wrote_are_not_xids():
    kmsg = FakeKmsg()
    kmsg.log(1, xid_message("0000:00:07", 79), 990.0, prio=12)  # LOG_USER: `echo ... > /dev/kmsg`
    kmsg.log(2, xid_message("0000:00:07", 13), 991.0, prio=4)
    assert codes(kmsg_reader(kmsg).read()) == [13]


def test_kmsg_lookback_keeps_recent_history_and_drops_old():
    kmsg = FakeKmsg()
    kmsg.log(1, xid_message("0000:00:07", 48), 20.0)  # at boot, 980 s before the agent started
    kmsg.log(2, xid_message("0000:00:07", 63), MONO_S - LOOKBACK_S - 1)
    kmsg.log(3, xid_message("0000:00:07", 79), MONO_S - 120.0)  # while the agent restarted
    clock = ManualAgentClock()
    reader = kmsg_reader(kmsg, clock)
    assert codes(reader.read()) == [79]
    clock.advance(15)
    kmsg.log(4, xid_message("0000:00:07", 94), MONO_S + 10)
    assert codes(reader.read()) == [94]


def test_kmsg_lookback_of_zero_reports_only_what_comes_after_the_start():
    kmsg = FakeKmsg()
    kmsg.log(1, xid_message("0000:00:07", 79), MONO_S - 5)
    reader = KernelLogReader(KmsgSource(open_device=kmsg.open), clock=ManualAgentClock(), lookback_s=0)
    assert reader.read() == []
    kmsg.log(2, xid_message("0000:00:07", 13), MONO_S + 1)
    assert codes(reader.read()) == [13]


def test_kmsg_storm_is_bounded_per_read_and_nothing_is_lost():
    kmsg = FakeKmsg()
    for seq in range(5000):
        kmsg.log(seq, xid_message("0000:00:07", 13), MONO_S - 1)
    reader = kmsg_reader(kmsg, max_records_per_read=100)
    first = reader.read()
    assert len(first) == 100
    seen = [x.sequence for x in first]
    while batch := reader.read():
        assert len(batch) <= 100
        seen += [x.sequence for x in batch]
    assert seen == list(range(5000))


def test_kmsg_storm_bounds_the_records_read_not_only_the_xids():
    kmsg = FakeKmsg()
    for seq in range(1000):
        kmsg.log(seq, "eth0: link flapping", MONO_S - 1)
    devices: list[_FakeKmsgDevice] = []
    source = KmsgSource(open_device=lambda path: devices.append(kmsg.open(path)) or devices[-1])
    KernelLogReader(source, clock=ManualAgentClock(), max_records_per_read=50).read()
    assert devices[0].reads == 50


def lost(xids) -> list[tuple[str, int, bool]]:
    return [(x.pci_bus_id, x.xid, x.lost_gpu_line) for x in xids]


def test_a_lost_gpu_line_without_an_xid_line_is_read_as_xid_79():
    kmsg = FakeKmsg()
    reader = kmsg_reader(kmsg)
    assert reader.read() == []
    kmsg.log(1, LOST_AT_RUN_TIME, 1001.0, prio=3)
    kmsg.log(2, lost_at_probe("0000:b3:00.0", "\\x0a"), 1002.0, prio=3)
    assert lost(reader.read()) == [("0000:00:08.0", 79, True), ("0000:b3:00.0", 79, True)]


def test_an_xid_79_and_its_lost_gpu_line_count_once_in_one_read_or_a_minute():
    clock = ManualAgentClock()
    kmsg = FakeKmsg()
    reader = kmsg_reader(kmsg, clock)
    assert reader.read() == []
    # the driver's order: the XID, then the words; the older drivers' bus id has no function
    kmsg.log(1, xid_message("0000:00:08", 79), 1001.0)
    kmsg.log(2, LOST_AT_RUN_TIME, 1001.0)
    kmsg.log(3, "NVRM: GPU 0000:00:09.0: GPU has fallen off the bus.", 1001.0)  # another GPU: its own
    assert lost(reader.read()) == [("0000:00:08", 79, False), ("0000:00:09.0", 79, True)]
    clock.advance(30)
    kmsg.log(4, LOST_AT_RUN_TIME, 1030.0)  # a read split the pair, or the line repeats: the same event
    assert reader.read() == []
    clock.advance(120)
    kmsg.log(5, LOST_AT_RUN_TIME, 1150.0)  # minutes later: a new one
    assert lost(reader.read()) == [("0000:00:08.0", 79, True)]


def test_lost_gpu_words_before_the_xid_line_in_one_read_count_once():
    kmsg = FakeKmsg()
    reader = kmsg_reader(kmsg)
    assert reader.read() == []
    kmsg.log(1, LOST_AT_RUN_TIME, 1001.0)
    kmsg.log(2, xid_message("0000:00:08", 79), 1001.0)
    assert lost(reader.read()) == [("0000:00:08", 79, False)]


def test_kmsg_refused_is_reported_once_with_the_reason_and_retried(caplog):
    kmsg = FakeKmsg()
    kmsg.refuse = PermissionError(errno.EPERM, "Operation not permitted")
    reader = kmsg_reader(kmsg)
    with caplog.at_level(logging.WARNING, logger="fleet.agent.kmsg"):
        for _ in range(3):
            assert reader.read() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "CAP_SYSLOG" in warnings[0] and "/dev/kmsg" in warnings[0]
    assert not reader.available and "Operation not permitted" in (reader.error or "")
    kmsg.refuse = None
    kmsg.log(1, xid_message("0000:00:07", 79), MONO_S - 1)
    assert codes(reader.read()) == [79] and reader.available


def test_a_character_device_is_read_as_kmsg_not_as_text():
    reader = open_kernel_log(os.devnull, clock=ManualAgentClock())  # /dev/null: a character device at EOF
    assert isinstance(reader.source, KmsgSource)
    assert reader.read() == [] and reader.available


# -- text logs -----------------------------------------------------------------------------------------------
def test_text_log_is_tailed_from_where_it_was_read(log_file):
    reader = text_reader(log_file)
    assert reader.read() == []
    append(log_file, "[1001.0] eth0: link up", "[1002.0] " + xid_message("0000:00:07", 13))
    first = reader.read()
    assert codes(first) == [13] and first[0].kernel_time_s == 1002.0
    assert reader.read() == []
    append(log_file, "[1003.0] " + xid_message("0000:00:07", 31))
    second = reader.read()
    assert codes(second) == [31] and second[0].sequence > first[0].sequence


def test_a_partial_last_line_waits_for_its_newline(log_file):
    reader = text_reader(log_file)
    reader.read()
    with log_file.open("a") as f:
        f.write("NVRM: Xid (PCI:0000:00:07): 7")
    assert reader.read() == []
    with log_file.open("a") as f:
        f.write("9, pid=1, GPU has fallen off the bus.\n")
    assert codes(reader.read()) == [79]


def test_a_truncated_text_log_is_read_from_its_start(log_file):
    reader = text_reader(log_file)
    reader.read()
    append(log_file, "padding " * 20, xid_message("0000:00:07", 13), xid_message("0000:00:07", 31))
    assert codes(reader.read()) == [13, 31]
    log_file.write_text(xid_message("0000:00:07", 79) + "\n")  # `> kern.log`, or logrotate's copytruncate
    assert codes(reader.read()) == [79]


def test_a_rotated_text_log_is_read_to_its_end_then_the_new_file_from_its_start(log_file):
    reader = text_reader(log_file)
    reader.read()
    append(log_file, xid_message("0000:00:07", 13))
    rotated = log_file.with_name("kern.log.1")
    os.rename(log_file, rotated)
    append(rotated, xid_message("0000:00:07", 31))  # the writer still had the old file open
    log_file.write_text(xid_message("0000:00:07", 79) + "\n")
    assert codes(reader.read()) == [13, 31, 79]
    append(log_file, xid_message("0000:00:07", 94))
    assert codes(reader.read()) == [94]


def test_text_lookback_keeps_recent_history_by_its_stamps_and_drops_the_rest(log_file):
    append(
        log_file,
        f"{iso(WALL_S - 3600)} gpu-node kernel: " + xid_message("0000:00:07", 48),  # an hour ago
        f"{iso(WALL_S - 300)} gpu-node kernel: " + xid_message("0000:00:07", 79),  # five minutes ago
        f"[{MONO_S - 2 * LOOKBACK_S:.6f}] " + xid_message("0000:00:07", 63),  # old kernel stamp
        f"[{MONO_S - 60:.6f}] " + xid_message("0000:00:07", 13),  # recent kernel stamp
        f"[{MONO_S + 50_000:.6f}] " + xid_message("0000:00:07", 31),  # an earlier, longer boot
        xid_message("0000:00:07", 92),  # no stamp: cannot be placed
    )
    reader = text_reader(log_file)
    assert codes(reader.read()) == [79, 13]
    append(log_file, xid_message("0000:00:07", 94))  # after the start: new whatever its stamp
    assert codes(reader.read()) == [94]


def test_text_lookback_after_a_reboot_skips_the_earlier_boots_lines(log_file):
    """An XID 119 (reset class) rebooted the node; the agent starts 90 s into the new boot. Its kern.log line,
    stamped 5 minutes ago, is within the lookback but from before the boot: replayed, it read as the fault
    coming back after the reboot meant to clear it. A line of this boot is still taken."""
    append(
        log_file,
        f"{iso(WALL_S - 300)} gpu-node kernel: " + xid_message("0000:00:07", 119),  # before the reboot
        f"{iso(WALL_S - 30)} gpu-node kernel: " + xid_message("0000:00:08", 79),  # 60 s into this boot
    )
    reader = text_reader(log_file, clock=ManualAgentClock(wall_s=WALL_S, monotonic_s=90.0))
    assert codes(reader.read()) == [79]


def test_first_read_of_a_long_text_log_starts_near_its_end_on_a_whole_line(log_file):
    prefix = f"Jan  1 00:00:00 gpu-node kernel: [{MONO_S - 1:.6f}] "
    lines = [prefix + xid_message("0000:00:07", code) for code in range(100, 160)]
    append(log_file, *lines)
    line_bytes = len(lines[0]) + 1
    # The tail starts 3 bytes into line 50: its rest ("  1 00:00:00 gpu-node kernel: [999.0] NVRM: Xid ...")
    # would still parse, with a plausible stamp, if the reader did not skip to the next whole line.
    reader = text_reader(log_file, tail_bytes=10 * line_bytes - 3)
    assert codes(reader.read()) == list(range(151, 160))


def test_a_missing_text_log_is_reported_once_and_picked_up_when_it_appears(tmp_path, caplog):
    path = tmp_path / "kern.log"
    reader = open_kernel_log(str(path), clock=ManualAgentClock(), lookback_s=LOOKBACK_S)
    assert isinstance(reader.source, TextLogSource)
    with caplog.at_level(logging.WARNING, logger="fleet.agent.kmsg"):
        for _ in range(3):
            assert reader.read() == []
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert not reader.available and "No such file" in (reader.error or "")
    path.write_text(f"[{MONO_S - 10:.6f}] " + xid_message("0000:00:07", 79) + "\n")
    assert codes(reader.read()) == [79] and reader.available


def test_text_storm_is_bounded_per_read_and_nothing_is_lost(log_file):
    reader = text_reader(log_file, max_records_per_read=100)
    reader.read()
    append(log_file, *(xid_message("0000:00:07", 13) for _ in range(5000)))
    first = reader.read()
    assert len(first) == 100
    offsets = [x.sequence for x in first]
    while batch := reader.read():
        assert len(batch) <= 100
        offsets += [x.sequence for x in batch]
    assert len(offsets) == 5000 and len(set(offsets)) == 5000


def test_a_probes_lost_gpu_lines_in_a_text_log_are_one_xid_79_and_a_storm_of_them_counts_once(log_file):
    reader = text_reader(log_file)
    assert reader.read() == []
    probe = [
        "[ 1001.250000] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:2330) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
    ]
    append(log_file, *probe, "[ 1001.260000] nvidia: probe of 0000:b3:00.0 failed with error -1", *probe)
    xids = reader.read()
    assert [(x.pci_bus_id, x.xid, x.kernel_time_s, x.lost_gpu_line) for x in xids] == [
        ("0000:b3:00.0", 79, 1001.25, True)
    ]
    # a first line whose last never comes (another message took its place) is no lost GPU
    append(log_file, "[ 1002.0] NVRM: The NVIDIA GPU 0000:b4:00.0", "[ 1002.1] a", "[ 1002.2] b", "[ 1002.3]")
    append(log_file, "               NVRM: fallen off the bus and is not responding to commands.")
    assert reader.read() == []


def test_malformed_text_lines_are_skipped(log_file):
    reader = text_reader(log_file, chunk_bytes=4096)
    reader.read()
    with log_file.open("ab") as f:
        f.write(b"\xff\xfe\x00 binary junk NVRM: Xid (PCI:\n")
        f.write(b"NVRM: Xid (PCI:0000:00:07): not-a-number\n")
        f.write(b"x" * 10_000 + b"\n")  # longer than a chunk
        f.write(b"\xffNVRM: Xid (PCI:0000:00:07): 79, pid=1, \xfe fallen off the bus\n")
    assert codes(reader.read()) == [79]


# -- mapping to GPUs and merging with NVML -------------------------------------------------------------------
def collector_with_log(log_file: Path, gpus: list[FakeGpu] | None = None, **nvml_kw) -> GpuCollector:
    reader = text_reader(log_file)
    return GpuCollector(FakeNvml(gpus if gpus is not None else [FakeGpu(), FakeGpu()], **nvml_kw), reader)


def test_kernel_xids_map_to_the_gpu_with_that_bus_id(log_file):
    collector = collector_with_log(log_file)  # FakeNvml: GPU i at 00000000:00:(07+i).0
    collector.read()
    append(
        log_file,
        xid_message("0000:00:08", 48),  # GPU 1, as older drivers print it
        xid_message("0000:00:07.0", 13),  # GPU 0, with the function
        xid_message("0000:99:00", 79),  # no GPU the agent knows: still reported, for the node
    )
    snap = collector.read()
    assert [(e.gpu_index, e.xid, e.source) for e in snap.xid_events] == [
        (1, 48, XidSource.KERNEL_LOG),
        (0, 13, XidSource.KERNEL_LOG),
        (None, 79, XidSource.KERNEL_LOG),
    ]
    assert snap.xid_events[2].pci_bus_id == "0000:99:00"
    assert [g.last_xid for g in snap.gpus] == [13, 48]


def test_a_recovery_action_back_to_none_is_no_xid_and_one_that_asks_for_a_reset_is(log_file):
    collector = collector_with_log(log_file)
    collector.read()
    append(
        log_file,
        "Jan 01 00:00:01 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 154, GPU recovery action changed from "
        "0x0 (None) to 0x1 (GPU Reset Required)",
        "Jan 01 00:00:09 gpu-node kernel: NVRM: Xid (PCI:0000:00:07): 154, GPU recovery action changed from "
        "0x1 (GPU Reset Required) to 0x0 (None)",
    )
    assert [(e.gpu_index, e.xid) for e in collector.read().xid_events] == [(0, 154)]


def test_kernel_xid_of_a_lost_gpu_maps_by_its_last_known_bus_id(log_file):
    gpus = [FakeGpu(), FakeGpu()]
    collector = collector_with_log(log_file, gpus)
    collector.read()
    gpus[1].is_lost = True  # off the bus: NVML no longer answers with its bus id (and sends no event here)
    append(log_file, xid_message("0000:00:08", 79))
    snap = collector.read()
    assert snap.gpus[1].lost and snap.gpus[1].pci_bus_id is None
    assert [(e.gpu_index, e.xid) for e in snap.xid_events] == [(1, 79)]
    assert snap.gpus[1].last_xid == 79


def nv(gpu, xid):
    return XidEvent(gpu, xid, XidSource.NVML)


def kl(gpu, xid):
    return XidEvent(gpu, xid, XidSource.KERNEL_LOG)


@pytest.mark.parametrize(
    ("periods", "expected"),
    [
        # each period: (NVML events, kernel-log events) -> the (gpu, xid, source) kept that period
        ([([nv(1, 48)], [kl(1, 48)])], [[(1, 48, "nvml")]]),
        ([([nv(1, 48)], [kl(0, 48)])], [[(1, 48, "nvml"), (0, 48, "kernel_log")]]),  # another GPU
        ([([nv(1, 48)], [kl(1, 63)])], [[(1, 48, "nvml"), (1, 63, "kernel_log")]]),  # another code
        ([([], [kl(1, 48)]), ([nv(1, 48)], [])], [[(1, 48, "kernel_log")], []]),  # NVML a period late
        ([([nv(1, 48)], []), ([], [kl(1, 48)])], [[(1, 48, "nvml")], []]),  # kernel log a period late
        ([([nv(1, 13)] * 2, [kl(1, 13)] * 3)], [[(1, 13, "nvml"), (1, 13, "nvml"), (1, 13, "kernel_log")]]),
        # the carry lasts one period: the same XID two periods later is a new one
        ([([], [kl(1, 48)]), ([], []), ([nv(1, 48)], [])], [[(1, 48, "kernel_log")], [], [(1, 48, "nvml")]]),
        ([([nv(None, 79)], [kl(None, 79)])], [[(None, 79, "nvml")]]),
    ],
)
def test_an_xid_seen_by_both_sources_counts_once(periods, expected):
    carry = XidCarry()
    got = []
    for nvml, kernel in periods:
        merged, carry = merge_xid_events(nvml, kernel, carry)
        got.append([(e.gpu_index, e.xid, str(e.source)) for e in merged])
    assert got == expected


def test_collector_counts_an_xid_both_sources_saw_once(log_file):
    gpus = [FakeGpu(), FakeGpu()]
    collector = collector_with_log(log_file, gpus)
    collector.read()
    gpus[1].push_xid(48)
    append(log_file, xid_message("0000:00:08", 48))
    snap = collector.read()
    assert [(e.gpu_index, e.xid, e.source) for e in snap.xid_events] == [(1, 48, XidSource.NVML)]
    assert snap.xid_sources == [XidSource.NVML, XidSource.KERNEL_LOG] and snap.xid_supported
    assert collector.read().xid_events == []


def test_collector_counts_a_gpu_off_the_bus_once_whichever_lines_and_events_report_it(log_file):
    gpus = [FakeGpu(), FakeGpu()]
    collector = collector_with_log(log_file, gpus)
    collector.read()
    gpus[1].push_xid(79)
    append(log_file, xid_message("0000:00:08", 79), LOST_AT_RUN_TIME)
    assert [(e.gpu_index, e.xid) for e in collector.read().xid_events] == [(1, 79)]
    append(log_file, "NVRM: GPU 0000:00:07.0: GPU has fallen off the bus.")  # the words alone: GPU 0 lost
    snap = collector.read()
    assert [(e.gpu_index, e.xid, e.source) for e in snap.xid_events] == [(0, 79, XidSource.KERNEL_LOG)]
    assert snap.gpus[0].last_xid == 79


def test_a_gpu_nvml_reads_lost_counts_once_with_the_kernel_logs_xid_79_before_or_after(log_file):
    gpus = [FakeGpu(), FakeGpu()]
    nvml = FakeNvml(gpus)
    collector = GpuCollector(nvml, text_reader(log_file))
    collector.read()
    # the kernel log says it while NVML is down; NVML, back, answers GPU_IS_LOST: the same fall
    nvml.driver_unloaded = True
    gpus[1].lose(with_xid=False)
    append(log_file, xid_message("0000:00:08", 79))
    down = collector.read()
    assert not down.nvml_ok and [(e.gpu_index, e.xid) for e in down.xid_events] == [(1, 79)]
    nvml.driver_unloaded = False
    snap = collector.read()
    assert snap.gpus[1].gpu_is_lost and snap.xid_events == []
    # NVML first, the kernel log's XID line and words a period later: the same fall
    gpus[0].lose(with_xid=False)
    assert [(e.gpu_index, e.xid, e.source) for e in collector.read().xid_events] == [
        (0, 79, XidSource.NVML_GPU_IS_LOST)
    ]
    append(log_file, xid_message("0000:00:07", 79), "NVRM: GPU 0000:00:07.0: GPU has fallen off the bus.")
    assert collector.read().xid_events == []


def test_the_kernel_log_makes_xids_supported_where_nvml_events_are_not(log_file):
    collector = collector_with_log(log_file, [FakeGpu(xid_supported=False)])
    snap = collector.read()
    assert snap.xid_sources == [XidSource.KERNEL_LOG] and snap.xid_supported


def test_an_unreadable_kernel_log_leaves_nvml_events_as_the_only_source(tmp_path):
    reader = text_reader(tmp_path / "missing.log")
    gpus = [FakeGpu()]
    collector = GpuCollector(FakeNvml(gpus), reader)
    gpus[0].push_xid(79)
    snap = collector.read()
    assert snap.nvml_ok and snap.xid_sources == [XidSource.NVML] and snap.xid_supported
    assert [e.xid for e in snap.xid_events] == [79]


def test_kernel_xids_are_reported_while_nvml_is_down(log_file):
    collector = collector_with_log(log_file, library_missing=True)
    collector.read()
    append(log_file, xid_message("0000:00:07", 79))
    snap = collector.read()
    assert not snap.nvml_ok and snap.xid_sources == [XidSource.KERNEL_LOG]
    assert [(e.gpu_index, e.xid) for e in snap.xid_events] == [(None, 79)]


# -- the agent end to end ------------------------------------------------------------------------------------


def test_agent_publishes_an_xid_appended_to_the_kernel_log(log_file, closed_port_url):
    sink = RecordingSink(INSTANCE)
    clock = ManualAgentClock()
    agent = Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=closed_port_url, kernel_log=str(log_file)),
        nvml=FakeNvml([FakeGpu(), FakeGpu()]),
        clock=clock,
        publisher=CmsPublisher(sink),
    )
    seen = []

    def on_sample(sample):
        seen.append(sample)
        if len(seen) == 1:
            append(log_file, f"[{clock.monotonic():.6f}] " + xid_message("0000:00:08", 79))

    assert agent.run(threading.Event(), max_samples=3, on_sample=on_sample) == 3
    assert sink.values("gpu_xid") == [79.0]
    assert sink.values("gpu_device_xid", {"instanceId": INSTANCE, "gpu": "1"}) == [79.0]
    assert seen[1].gpu.xid_events[0].source is XidSource.KERNEL_LOG


@pytest.mark.parametrize(("boot_id_after", "published_after"), [("boot-1", []), ("boot-2", [79.0])])
def test_a_restarted_agent_counts_a_gpu_still_lost_again_only_after_a_reboot(
    tmp_path, log_file, closed_port_url, boot_id_after, published_after
):
    """GPU 1 falls off the bus (NVML's XID event and the kernel log's line) and the agent restarts 5 minutes
    later with it still lost: NVML answers GPU_IS_LOST and the kernel log's lookback replays the line. The
    state directory says this boot's agent counted that fall, so nothing is published again. After a reboot
    (another boot id) a GPU still lost is a new fall, as the reboot's health check expects."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    clock = ManualAgentClock()
    gpus = [FakeGpu(), FakeGpu()]

    def run(boot_id: str, samples: int, on_sample=None) -> list[float]:
        sink = RecordingSink(INSTANCE)
        config = AgentConfig(
            instance_id=INSTANCE, vllm_url=closed_port_url, kernel_log=str(log_file), state_dir=str(state_dir)
        )
        agent = Agent(
            config, nvml=FakeNvml(gpus), clock=clock, publisher=CmsPublisher(sink), boot_id=lambda: boot_id
        )
        assert agent.run(threading.Event(), max_samples=samples, on_sample=on_sample) == samples
        return sink.values("gpu_xid")

    def fall(sample) -> None:
        if not gpus[1].is_lost:
            gpus[1].lose()
            append(log_file, f"[{clock.monotonic():.6f}] " + xid_message("0000:00:08", 79))

    assert run("boot-1", 3, on_sample=fall) == [79.0]
    clock.advance(300.0)
    assert run(boot_id_after, 3) == published_after


def test_agent_without_a_kernel_log_has_only_nvml_events(closed_port_url):
    agent = Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=closed_port_url),
        nvml=FakeNvml([FakeGpu()]),
        clock=ManualAgentClock(),
    )
    assert agent.collect().gpu.xid_sources == [XidSource.NVML]


def test_cli_once_reports_an_xid_from_the_kernel_log(capsys, log_file, closed_port_url):
    # Logged shortly before the agent started (the real monotonic clock): within the lookback.
    append(log_file, f"[{time.monotonic() - 30:.6f}] " + xid_message("0000:00:07", 79))
    code = main(
        ["agent", "--once", "--json", "--no-publish", "--period-s", "0.05", "--instance-id", "i-1"]
        + ["--vllm-url", closed_port_url, "--kernel-log", str(log_file)]
    )
    out, _ = capsys.readouterr()
    assert code == 0
    sample = json.loads(out)
    assert "kernel_log" in sample["nvml"]["xid_sources"]
    assert [(e["xid"], e["source"], e["pci_bus_id"]) for e in sample["xid_events"]] == [
        (79, "kernel_log", "0000:00:07")
    ]
    assert sample["metrics"]["gpu_xid"] == 79.0


def test_cli_kernel_log_none_disables_it(capsys, monkeypatch, closed_port_url):
    monkeypatch.delenv("FLEET_KERNEL_LOG")
    code = main(
        ["agent", "--once", "--json", "--no-publish", "--period-s", "0.05", "--instance-id", "i-1"]
        + ["--vllm-url", closed_port_url, "--kernel-log", "none"]
    )
    out, _ = capsys.readouterr()
    assert code == 0 and "kernel_log" not in json.loads(out)["nvml"]["xid_sources"]


@pytest.mark.parametrize("kind", ["directory", "fifo", "no such directory", "empty"])
def test_bad_kernel_log_values_are_one_line_exit_2(capsys, tmp_path, kind):
    value = {
        "directory": str(tmp_path),
        "fifo": str(tmp_path / "fifo"),
        "no such directory": str(tmp_path / "nowhere" / "kern.log"),
        "empty": " ",
    }[kind]
    if kind == "fifo":
        os.mkfifo(value)
    code = main(["agent", "--once", "--no-publish", "--instance-id", "i-1", "--kernel-log", value])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "--kernel-log" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_instance_values_publish_the_kernel_logs_xid_with_nvml_down(log_file):
    collector = collector_with_log(log_file, library_missing=True)
    collector.read()
    append(log_file, xid_message("0000:00:07", 48))
    from fleet.agent.clock import StampResult
    from fleet.agent.sample import Sample
    from fleet.agent.vllm import VllmReading

    sample = Sample(
        INSTANCE, StampResult(int(WALL_S * 1000), "wall", 0.0), collector.read(), VllmReading(up=False)
    )
    assert instance_values(sample)["gpu_xid"] == 48.0
