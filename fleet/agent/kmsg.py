"""XID errors from the kernel log: the driver's own record, read beside NVML's event set.

NVIDIA's driver prints every XID to the kernel ring buffer (docs.nvidia.com/deploy/xid-errors: "grep for
NVRM: Xid"), in one of these forms depending on the driver's age::

    NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error ...
    NVRM: Xid (PCI:0000:00:07.0): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (0000:03:00): 14, Channel 00000001

The driver also says a GPU is lost in words, without an XID code, and each such line is read as XID 79
(ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, the code the driver logs for the same event), from the driver's
source (open-gpu-kernel-modules: ``osHandleGpuLost`` in osapi.c; the probe's register check in nv.c)::

    NVRM: GPU 0000:05:00.0: GPU has fallen off the bus.

at run time, printed right after the ``Xid (...): 79`` line of the same event, and::

    NVRM: The NVIDIA GPU 0000:b3:00.0
    NVRM: (PCI ID: 10de:26b5) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

when the driver loads or probes a GPU whose registers read all ones (after a reboot, say), with no XID line
at all. That one is a single kernel record with embedded newlines: /dev/kmsg escapes them (``\\x0a``), rsyslog
writes ``#012``, dmesg and journalctl print three lines (the text reader joins them). A lost-GPU line for a
GPU that had an XID 79 in the same read or within ``LOST_GPU_SAME_EVENT_S`` is the same event and is dropped,
as are the repeats of a storm of them (a GPU the driver probes again and again). Other wordings are not
read: ``RmInitAdapter failed!`` is any failed initialisation (a driver that does not support the GPU, a
firmware that did not boot), not a lost GPU; ``GPU is lost`` is what nvidia-smi prints, and the driver's own
``GPU is lost, skipping nv_pci_probe`` is an info-level message printed only with debug logging.

The NVML event set only sees XIDs raised after the agent registered, and some vGPU / passthrough setups do
not deliver them at all; the kernel log has them all, including those logged while the agent restarted.

Two sources, one reader:

- ``/dev/kmsg`` (a character device): one ``read()`` returns one record,
  ``priority,sequence,timestamp_us,flags[,...];message`` followed by ``" KEY=value"`` continuation lines
  (Documentation/ABI/testing/dev-kmsg). Opened non-blocking and read until EAGAIN; EPIPE means the ring buffer
  overwrote records before we read them (counted, and reading goes on at the oldest record left). Records are
  deduplicated by sequence number, so reopening after an error replays nothing. Records whose syslog facility
  is not the kernel's (0) were written from user space and are ignored: only the kernel can log as LOG_KERN.
- a text file in dmesg / ``journalctl -k`` / ``/var/log/kern.log`` form, tailed from the byte offset last read
  (deduplicated by position). A file that shrank was truncated and one whose inode changed was rotated: both
  are read again from their start (a rotated file's old copy is read to its end first).

On the first read only the last ``lookback_s`` of history is taken (15 minutes by default: long enough to
cover an agent restart, short enough not to replay the boot's history as new incidents): a kmsg record's
timestamp is compared with CLOCK_MONOTONIC (the kernel stamps records with the same clock, less drift), a text
line's wall-clock stamp with the wall clock (and not before this boot: the boot's wall time is the wall clock
less CLOCK_MONOTONIC), else its ``[seconds]`` kernel stamp with CLOCK_MONOTONIC. A text line older than the
reader with no stamp at all cannot be placed and is skipped. Everything logged after the
first read is taken whatever its stamp.

Failure model: an unreadable source (a missing file; ``EPERM`` on /dev/kmsg when ``kernel.dmesg_restrict=1``
and the agent has neither root nor CAP_SYSLOG) makes the reader unavailable, logged once with the reason and
retried every period; it never raises into the agent's loop. Malformed records are skipped. At most
``max_records_per_read`` records are parsed per read, so a storm costs a bounded slice of each period and the
rest is read in the next ones.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Protocol

from fleet.agent.clock import AgentClock

log = logging.getLogger("fleet.agent.kmsg")

DEFAULT_KERNEL_LOG = "/dev/kmsg"
# Long enough that an XID logged while the agent restarted (systemd RestartSec=5, a crash loop, a package
# upgrade) is still picked up, short enough that the boot's history is not replayed as a new incident.
DEFAULT_LOOKBACK_S = 15 * 60.0
# Records parsed per read at most: a read() and a regex search each, a few milliseconds for the lot.
MAX_RECORDS_PER_READ = 2000
# A kmsg record is at most CONSOLE_EXT_LOG_MAX (8 KiB) with its dictionary; a shorter buffer gets EINVAL.
KMSG_READ_BYTES = 16 * 1024
# A kernel stamp a little after "now" is still this boot's (the printk clock and CLOCK_MONOTONIC drift
# apart slightly); one far after it is from an earlier, longer-running boot.
_MONOTONIC_SLACK_S = 60.0
# The first read of a text log starts this far from its end, not at its start: history older than the
# lookback is not wanted, and a kern.log can hold months of it.
TEXT_TAIL_BYTES = 1024 * 1024
TEXT_CHUNK_BYTES = 256 * 1024

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\):"
    r"\s*(?P<xid>\d{1,6})\b"
)
_BUS = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?"
XID_FALLEN_OFF_THE_BUS = 79
# The run-time line (osHandleGpuLost) and the probe's, whole (one kmsg record, or a text line where the
# newlines were escaped); the probe's first line alone, whose last line follows two lines later in dmesg.
_LOST_GPU_RE = re.compile(
    rf"NVRM: GPU (?P<bus>{_BUS}): GPU has fallen off the bus\b"
    rf"|NVRM: The NVIDIA GPU (?P<probe_bus>{_BUS})\b.*?fallen off the bus and is not responding"
)
_PROBE_FIRST_LINE_RE = re.compile(rf"NVRM: The NVIDIA GPU (?P<bus>{_BUS})\s*$")
_PROBE_LAST_LINE = "fallen off the bus and is not responding"
_PROBE_LINES_AFTER_FIRST = 2
# A lost-GPU line this soon after an XID 79 (or another lost-GPU line) of the same GPU is the same event: the
# driver prints the run-time line right after the XID, so a minute covers a read that split the two.
LOST_GPU_SAME_EVENT_S = 60.0
_TEXT_MARKERS = (b"NVRM: Xid", b"fallen off the bus", b"NVRM: The NVIDIA GPU")

# XID 154 (driver r550 and later) names the recovery the GPU now needs, NVML's nvmlGpuRecoveryAction_t:
#   NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
# 0x1 GPU Reset Required, 0x2 Node Reboot Required, 0x3 Drain P2P, 0x4 Drain and Reset. A change *to* 0x0
# (None) says the GPU needs nothing any more (a reset completed): no fault, so not reported.
XID_RECOVERY_ACTION_CHANGED = 154
_RECOVERY_ACTION_RE = re.compile(
    r"recovery action changed from 0x[0-9A-Fa-f]+\b.*?\bto 0x(?P<to>[0-9A-Fa-f]+)"
)
_BUS_ID_RE = re.compile(
    r"(?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})"
    r"(?:\.(?P<function>[0-7]))?"
)
# "flags[,...]": the flags field came in kernel 3.6, and later fields may follow it.
_KMSG_HEADER_RE = re.compile(r"(?P<prio>\d+),(?P<seq>\d+),(?P<ts>\d+)(?:,[^;]*)?")
_KERNEL_STAMP_RE = re.compile(r"\[\s*(\d+\.\d+)\]")
_ISO_STAMP_RE = re.compile(
    r"\s*(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2}))"
)
_SYSLOG_TAG_RE = re.compile(r"(?:^|\s)(?P<tag>[^\s\[\]]+)(?:\[\d+\])?:$")


@dataclass(frozen=True)
class KernelXid:
    """One XID the driver logged."""

    pci_bus_id: str  # as the kernel printed it: "0000:3b:00" or "0000:3b:00.0"
    xid: int
    kernel_time_s: float | None  # seconds since boot (kmsg timestamp, a dmesg "[...]" stamp); None if absent
    sequence: int  # the kmsg sequence number, or the line's byte offset in a text log
    lost_gpu_line: bool = False  # the driver's "fallen off the bus" words, read as XID 79 (no XID line)


def parse_lost_gpu_message(message: str) -> str | None:
    """The bus id of a GPU the driver says is lost ("fallen off the bus", the words without an XID), None for
    any other message."""
    match = _LOST_GPU_RE.search(message)
    if match is None:
        return None
    return match["bus"] or match["probe_bus"]


def parse_xid_message(message: str) -> tuple[str, int] | None:
    """``(pci_bus_id, xid)`` of an ``NVRM: Xid (...)`` message, None for any other message."""
    match = _XID_RE.search(message)
    if match is None or _recovered(match, message):
        return None
    return match["bus"], int(match["xid"])


def _find_fault(text: str) -> tuple[int, str, int, bool] | None:
    """``(where, pci_bus_id, xid, lost_gpu_line)`` of an XID or a lost-GPU message in ``text``, else None."""
    match = _XID_RE.search(text)
    if match is not None:
        return None if _recovered(match, text) else (match.start(), match["bus"], int(match["xid"]), False)
    lost = _LOST_GPU_RE.search(text)
    if lost is None:
        return None
    return lost.start(), lost["bus"] or lost["probe_bus"], XID_FALLEN_OFF_THE_BUS, True


def _recovered(match: re.Match[str], text: str) -> bool:
    """An XID 154 whose new recovery action is None (0x0): the GPU recovered, nothing to act on."""
    if int(match["xid"]) != XID_RECOVERY_ACTION_CHANGED:
        return False
    action = _RECOVERY_ACTION_RE.search(text, match.end())
    return action is not None and int(action["to"], 16) == 0


def normalize_pci_bus_id(text: str) -> str | None:
    """``dddd:bb:dd.f`` in lower case, from any of the forms NVML and the kernel print.

    NVML's ``busId`` has an 8-digit domain (``00000000:3B:00.0``), the kernel a 4-digit one and, in older
    drivers, no function (``0000:3b:00``). A missing domain or function is 0: an NVIDIA GPU is function 0 of
    its device (its audio controller is function 1). None for text that is no bus id.
    """
    match = _BUS_ID_RE.fullmatch(text.strip())
    if match is None:
        return None
    domain = int(match["domain"] or "0", 16)
    bus, device = int(match["bus"], 16), int(match["device"], 16)
    function = int(match["function"] or "0")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


@dataclass(frozen=True)
class KmsgRecord:
    """One /dev/kmsg record's header and first line (continuation lines dropped)."""

    facility: int
    sequence: int
    kernel_time_s: float
    message: str


def parse_kmsg_record(raw: bytes) -> KmsgRecord | None:
    """A ``priority,sequence,timestamp_us,flags[,...];message`` record, or None when malformed."""
    text = raw.decode("utf-8", errors="replace")
    first_line = text.split("\n", 1)[0]  # the rest: " KEY=value" dictionary lines
    header, sep, message = first_line.partition(";")
    match = _KMSG_HEADER_RE.fullmatch(header)
    if not sep or match is None:
        return None
    return KmsgRecord(
        facility=int(match["prio"]) >> 3,  # the low 3 bits are the level, the rest the syslog facility
        sequence=int(match["seq"]),
        kernel_time_s=int(match["ts"]) / 1e6,
        message=message,
    )


@dataclass(frozen=True)
class TextXid:
    """An XID line of a text log, with the stamps its prefix carried."""

    pci_bus_id: str
    xid: int
    kernel_time_s: float | None
    wall_time_s: float | None
    lost_gpu_line: bool = False


def parse_text_line(line: str) -> TextXid | None:
    """An XID (or a lost-GPU line, as XID 79) from a dmesg, ``journalctl -k`` or kern.log line, None for any
    other line.

    The prefix may carry an ISO 8601 wall-clock stamp, a syslog ``host tag:`` and a ``[seconds]`` kernel
    stamp, in the orders those tools print them. A line whose syslog tag is not ``kernel`` was logged by a
    program, not the driver, and is not an XID.
    """
    found = _find_fault(line)
    if found is None:
        return None
    start, bus, xid, lost = found
    return _stamped(line[:start], bus, xid, lost)


def parse_probe_first_line(line: str) -> TextXid | None:
    """The first of the three lines a probe that found the GPU lost prints (``NVRM: The NVIDIA GPU <bus>``),
    as XID 79 with its stamps; the caller confirms it with the third line."""
    match = _PROBE_FIRST_LINE_RE.search(line)
    if match is None:
        return None
    return _stamped(line[: match.start()], match["bus"], XID_FALLEN_OFF_THE_BUS, True)


def _stamped(prefix: str, bus: str, xid: int, lost: bool) -> TextXid | None:
    stamp = _KERNEL_STAMP_RE.search(prefix)
    tag = _SYSLOG_TAG_RE.search(_KERNEL_STAMP_RE.sub(" ", prefix).rstrip())
    if tag is not None and tag["tag"] != "kernel":
        return None
    return TextXid(
        pci_bus_id=bus,
        xid=xid,
        kernel_time_s=float(stamp[1]) if stamp else None,
        wall_time_s=_wall_time_s(prefix),
        lost_gpu_line=lost,
    )


def _wall_time_s(prefix: str) -> float | None:
    match = _ISO_STAMP_RE.match(prefix)
    if match is None:
        return None
    try:
        return datetime.fromisoformat(match[1].replace(",", ".")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class LookbackWindow:
    """Which of the records already in the log when the reader started are recent enough to report."""

    since_monotonic_s: float
    until_monotonic_s: float
    since_wall_s: float

    @classmethod
    def ending_now(cls, clock: AgentClock, lookback_s: float) -> LookbackWindow:
        """The last ``lookback_s``, and nothing before this boot: CLOCK_MONOTONIC counts from the boot, so a
        wall stamp older than now less the monotonic time (and the slack) is an earlier boot's line in a
        kern.log; replayed after the reboot meant to clear its XID, it read as the fault coming back."""
        now_s = clock.monotonic()
        since_boot_s = max(0.0, now_s) + _MONOTONIC_SLACK_S
        return cls(
            now_s - lookback_s, now_s + _MONOTONIC_SLACK_S, clock.time() - min(lookback_s, since_boot_s)
        )

    def admits(self, kernel_time_s: float | None, wall_time_s: float | None) -> bool:
        # A wall stamp survives reboots (a kern.log spans them), so it wins when both are there.
        if wall_time_s is not None:
            return wall_time_s >= self.since_wall_s
        if kernel_time_s is not None:
            return self.since_monotonic_s <= kernel_time_s <= self.until_monotonic_s
        return False  # cannot be placed in time: not replayed


class KernelLogSource(Protocol):
    """One kind of kernel log. ``read`` raises OSError when the source fails; the reader handles it."""

    path: str
    overwritten_total: int

    def open(self) -> None: ...
    def read(self, budget: int, window: LookbackWindow) -> list[KernelXid]: ...
    def close(self) -> None: ...


class KmsgDevice(Protocol):
    """An open /dev/kmsg: ``read`` returns one record, raises BlockingIOError when none is left and
    BrokenPipeError when records were overwritten since the last read."""

    def read(self, size: int) -> bytes: ...
    def close(self) -> None: ...


class _KmsgFd:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def read(self, size: int) -> bytes:
        return os.read(self._fd, size)

    def close(self) -> None:
        os.close(self._fd)


class KmsgSource:
    """/dev/kmsg, record by record. Each open starts at the oldest record in the ring buffer."""

    def __init__(self, path: str = DEFAULT_KERNEL_LOG, open_device: Callable[[str], KmsgDevice] = _KmsgFd):
        self.path = path
        self.overwritten_total = 0
        self._open_device = open_device
        self._device: KmsgDevice | None = None
        self._last_sequence = -1
        self._caught_up = False  # reached the end of the buffer once: later records are new, not history

    def open(self) -> None:
        if self._device is None:
            self._device = self._open_device(self.path)

    def read(self, budget: int, window: LookbackWindow) -> list[KernelXid]:
        assert self._device is not None
        out: list[KernelXid] = []
        for _ in range(budget):
            try:
                raw = self._device.read(KMSG_READ_BYTES)
            except BlockingIOError:
                self._caught_up = True
                break
            except BrokenPipeError:
                self.overwritten_total += 1  # the position moved on to the oldest record left
                continue
            if not raw:  # end of a regular file standing in for the device
                self._caught_up = True
                break
            if b"NVRM: Xid" not in raw and b"fallen off the bus" not in raw:  # most records: not parsed
                continue
            xid = self._xid_of(parse_kmsg_record(raw), window)
            if xid is not None:
                out.append(xid)
        return out

    def _xid_of(self, record: KmsgRecord | None, window: LookbackWindow) -> KernelXid | None:
        if record is None or record.sequence <= self._last_sequence:
            return None
        self._last_sequence = record.sequence
        if record.facility != 0:  # written from user space: only the kernel logs as LOG_KERN
            return None
        found = _find_fault(record.message)
        if found is None:
            return None
        if not self._caught_up and not window.admits(record.kernel_time_s, None):
            return None
        _, bus, xid, lost = found
        return KernelXid(bus, xid, record.kernel_time_s, record.sequence, lost_gpu_line=lost)

    def close(self) -> None:
        device, self._device = self._device, None
        if device is not None:
            device.close()


class TextLogSource:
    """A dmesg / journalctl -k / kern.log text file, tailed line by line from the offset last read."""

    def __init__(self, path: str, *, tail_bytes: int = TEXT_TAIL_BYTES, chunk_bytes: int = TEXT_CHUNK_BYTES):
        self.path = path
        self.overwritten_total = 0
        self._tail_bytes = tail_bytes
        self._chunk_bytes = chunk_bytes
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file the offset is in
        self._offset = 0
        self._history_end = 0  # lines before this offset were in the file when it was first opened
        # a probe's "NVRM: The NVIDIA GPU <bus>" line, its offset, and how many lines its last may still be
        self._probe: tuple[TextXid, int, int] | None = None

    def open(self) -> None:
        if self._file is not None:
            return
        # Non-blocking: opening a FIFO with no writer would otherwise hang the period.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file or a character device")
        f = os.fdopen(fd, "rb")
        identity = (st.st_dev, st.st_ino)
        try:
            if self._identity is None:  # the first file ever: only its tail is history worth a look
                self._offset = _line_start_at_or_after(f, max(0, st.st_size - self._tail_bytes))
                self._history_end = st.st_size
        except OSError:
            f.close()
            raise
        if self._identity is not None and identity != self._identity:  # replaced while closed: all new
            self._offset = self._history_end = 0
        self._file, self._identity = f, identity

    def read(self, budget: int, window: LookbackWindow) -> list[KernelXid]:
        out: list[KernelXid] = []
        while budget > 0:
            lines, at_end = self._next_lines(budget)
            budget -= max(1, len(lines))
            for offset, line in lines:
                xid = self._xid_of(offset, line, window)
                if xid is not None:
                    out.append(xid)
            if at_end and not self._follow_rotation():
                break
        return out

    def _next_lines(self, limit: int) -> tuple[list[tuple[int, bytes]], bool]:
        """Up to ``limit`` complete lines from the offset (moving it past them), and whether the end of the
        file was reached. A partial last line waits for its newline; a chunk without any is skipped."""
        assert self._file is not None
        size = os.fstat(self._file.fileno()).st_size
        if size < self._offset:
            log.info("kernel log %s was truncated: reading it from the start", self.path)
            self._offset = self._history_end = 0
        self._file.seek(self._offset)
        data = self._file.read(self._chunk_bytes)
        lines: list[tuple[int, bytes]] = []
        pos = 0
        while len(lines) < limit:
            newline = data.find(b"\n", pos)
            if newline < 0:
                break
            lines.append((self._offset + pos, data[pos:newline]))
            pos = newline + 1
        if not lines and len(data) == self._chunk_bytes:
            pos = len(data)  # one line longer than a chunk: not a kernel message, skipped
        self._offset += pos
        return lines, len(lines) < limit and len(data) < self._chunk_bytes

    def _xid_of(self, offset: int, line: bytes, window: LookbackWindow) -> KernelXid | None:
        probe = self._probe_ended_by(line)
        if probe is not None:
            return self._admitted(probe[0], probe[1], window)
        if not any(marker in line for marker in _TEXT_MARKERS):  # most lines: not decoded
            return None
        text = line.decode("utf-8", errors="replace")
        found = parse_text_line(text)
        if found is None:
            first = parse_probe_first_line(text)
            if first is not None:  # dmesg prints the probe's record as three lines: wait for its last
                self._probe = (first, offset, _PROBE_LINES_AFTER_FIRST)
            return None
        return self._admitted(found, offset, window)

    def _probe_ended_by(self, line: bytes) -> tuple[TextXid, int] | None:
        """The pending probe line and its offset when ``line`` is its last line; the pending one is given up
        after the lines it may take."""
        if self._probe is None:
            return None
        first, offset, left = self._probe
        if _PROBE_LAST_LINE.encode() in line:
            self._probe = None
            return first, offset
        self._probe = (first, offset, left - 1) if left > 1 else None
        return None

    def _admitted(self, found: TextXid, offset: int, window: LookbackWindow) -> KernelXid | None:
        if offset < self._history_end and not window.admits(found.kernel_time_s, found.wall_time_s):
            return None
        return KernelXid(
            found.pci_bus_id, found.xid, found.kernel_time_s, offset, lost_gpu_line=found.lost_gpu_line
        )

    def _follow_rotation(self) -> bool:
        """At the end of the file: when the path now names another file (rotated), move to its start."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # between the rename and the new file's creation: keep the old one
        if (st.st_dev, st.st_ino) == self._identity:
            return False
        log.info("kernel log %s was rotated: reading the new file from its start", self.path)
        self.close()
        self._identity = (st.st_dev, st.st_ino)
        self._offset = self._history_end = 0
        self.open()
        return True

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()


def _line_start_at_or_after(f: BinaryIO, pos: int) -> int:
    """The offset of the first line that starts at or after ``pos``."""
    if pos == 0:
        return 0
    f.seek(pos - 1)
    data = f.read(TEXT_CHUNK_BYTES)
    newline = data.find(b"\n")
    return pos + newline if newline >= 0 else pos - 1 + len(data)


class KernelLogReader:
    """XIDs from a kernel log source, once each, never raising: the agent calls ``read`` once a period."""

    def __init__(
        self,
        source: KernelLogSource,
        *,
        clock: AgentClock,
        lookback_s: float = DEFAULT_LOOKBACK_S,
        max_records_per_read: int = MAX_RECORDS_PER_READ,
    ) -> None:
        if lookback_s < 0:
            raise ValueError(f"lookback_s must be >= 0, got {lookback_s}")
        if max_records_per_read < 1:
            raise ValueError(f"max_records_per_read must be >= 1, got {max_records_per_read}")
        self.source = source
        self.lookback_s = lookback_s
        self.max_records_per_read = max_records_per_read
        self._clock = clock
        self._window: LookbackWindow | None = None
        self.available = False
        self.error: str | None = None
        self._overwritten_logged = 0
        self._lost_at: dict[str, float] = {}  # bus id -> monotonic time of its last XID 79 or lost-GPU line

    @property
    def path(self) -> str:
        return self.source.path

    @property
    def overwritten_total(self) -> int:
        """How many times the kernel overwrote records before they were read (EPIPE on /dev/kmsg)."""
        return self.source.overwritten_total

    def read(self) -> list[KernelXid]:
        """The XIDs logged since the last read (on the first, those within the lookback window)."""
        if self._window is None:
            self._window = LookbackWindow.ending_now(self._clock, self.lookback_s)
        try:
            self.source.open()
            xids = self.source.read(self.max_records_per_read, self._window)
        except OSError as exc:
            self.source.close()
            self._unavailable(self._describe(exc))
            return []
        self._now_available()
        self._note_overwrites()
        return self._without_repeated_lost_gpu(xids)

    def _without_repeated_lost_gpu(self, xids: list[KernelXid]) -> list[KernelXid]:
        """``xids`` less the lost-GPU lines of an event already counted: one for a GPU with an XID 79 line in
        this read or within LOST_GPU_SAME_EVENT_S (the driver prints both for one event), or another lost-GPU
        line within it (a storm). XID lines themselves are all kept."""
        now_s = self._clock.monotonic()
        with_xid_line = {
            _bus_key(x.pci_bus_id) for x in xids if x.xid == XID_FALLEN_OFF_THE_BUS and not x.lost_gpu_line
        }
        out: list[KernelXid] = []
        for x in xids:
            if x.xid == XID_FALLEN_OFF_THE_BUS:
                bus = _bus_key(x.pci_bus_id)
                last_s = self._lost_at.get(bus)
                recent = last_s is not None and now_s - last_s <= LOST_GPU_SAME_EVENT_S
                self._lost_at[bus] = now_s
                if x.lost_gpu_line and (bus in with_xid_line or recent):
                    continue
            out.append(x)
        return out

    def close(self) -> None:
        self.source.close()

    def _describe(self, exc: OSError) -> str:
        reason = exc.strerror or str(exc)
        if isinstance(exc, PermissionError):
            reason += " (needs root or CAP_SYSLOG when kernel.dmesg_restrict=1, or read access to the file)"
        return f"{self.path}: {reason}"

    def _unavailable(self, reason: str) -> None:
        if reason != self.error:
            log.warning("kernel log unavailable, XIDs come from NVML events only: %s", reason)
        self.available, self.error = False, reason

    def _now_available(self) -> None:
        if not self.available:
            log.info("reading XIDs from the kernel log %s%s", self.path, " again" if self.error else "")
        self.available, self.error = True, None

    def _note_overwrites(self) -> None:
        lost = self.overwritten_total - self._overwritten_logged
        if lost:
            log.warning(
                "kernel log %s: records overwritten before they were read (%d time(s)); XIDs may be missed",
                self.path,
                lost,
            )
            self._overwritten_logged = self.overwritten_total


def _bus_key(pci_bus_id: str) -> str:
    """One form of a bus id for matching: ``0000:3b:00`` (older drivers' XID lines) and ``0000:3b:00.0``
    (the lost-GPU lines) are the same GPU."""
    return normalize_pci_bus_id(pci_bus_id) or pci_bus_id


def open_kernel_log(
    path: str,
    *,
    clock: AgentClock,
    lookback_s: float = DEFAULT_LOOKBACK_S,
    max_records_per_read: int = MAX_RECORDS_PER_READ,
) -> KernelLogReader:
    """A reader for ``path``: /dev/kmsg (any character device) record by record, anything else as text."""
    try:
        is_device = stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        is_device = path == DEFAULT_KERNEL_LOG  # unreadable now: the reader says why on its first read
    source: KernelLogSource = KmsgSource(path) if is_device else TextLogSource(path)
    return KernelLogReader(
        source, clock=clock, lookback_s=lookback_s, max_records_per_read=max_records_per_read
    )
