"""What the agent keeps across its own restarts within one boot: the GPUs whose fall off the bus it counted.

Without it a restarted agent (a crash, an upgrade, systemd's ``Restart=always``) reads a GPU still off the bus
as a new fall: NVML answers GPU_IS_LOST again and the kernel log's lookback replays the XID 79 line. The
service joins that second XID 79 to the instance's open incident, but opens a new one where an operator
released the first.

The file is one small JSON object, written whole to a temporary file and renamed over the old one, and it
names the boot it belongs to (the kernel's ``boot_id``): a reboot starts clean, so a GPU still lost after the
reboot that was to fix it is a new fall, as the reboot's health check expects.

Failure model: a missing, unreadable or malformed file, one from another boot, or no boot id is no state (the
agent counts as it did without the file); a failed write is logged once and tried again at the next change.
Nothing here raises into the agent's loop.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("fleet.agent.state")

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"  # proc(5): a random UUID, new at every boot
FALLS_FILE_NAME = "gpu-falls.json"
# GPU index -> its PCI bus id when last known (None: never read), for a kernel log line that names the bus id
Falls = dict[int, str | None]


def read_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            value = f.read().strip()
    except (OSError, ValueError):
        return None
    return value or None


class FallsFile:
    """The GPUs whose fall off the bus this boot's agent counted, kept in ``path``."""

    def __init__(self, path: str, boot_id: str | None) -> None:
        self.path = path
        self.boot_id = boot_id
        self._warned = False

    def load(self) -> Falls:
        if self.boot_id is None:
            return {}
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("state file %s not read (%s): counting lost GPUs afresh", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("boot_id") != self.boot_id:
            return {}  # another boot's (or not ours)
        falls: Falls = {}
        for item in data.get("falls") or []:
            if not isinstance(item, dict):
                continue
            index, bus_id = item.get("index"), item.get("bus_id")
            if type(index) is int and index >= 0 and (bus_id is None or isinstance(bus_id, str)):
                falls[index] = bus_id
        return falls

    def save(self, falls: Falls) -> bool:
        """Write ``falls``; False (logged once) when it could not be written."""
        if self.boot_id is None:
            return True  # no boot to tie it to: a later run could not trust it
        body = {
            "boot_id": self.boot_id,
            "falls": [{"index": index, "bus_id": bus_id} for index, bus_id in sorted(falls.items())],
        }
        temporary = self.path + ".tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(body, f)
            os.replace(temporary, self.path)
        except OSError as exc:
            if not self._warned:
                log.warning(
                    "state file %s not written (%s): a restart would count lost GPUs again", self.path, exc
                )
                self._warned = True
            return False
        self._warned = False
        return True
