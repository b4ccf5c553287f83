"""Latency diagnosis: why P99 is high and what to change.

``rules.diagnose(window)`` is the pure analysis core; ``reader`` gathers a window from the cloud or a snapshot
file. The benchmark that produces each finding kind on purpose in the simulator (``fleet bench diagnose``)
lives beside the simulator: ``fleet.sim.diagnose_scenarios``, ``diagnose_run`` and ``diagnose_bench``.
"""

from fleet.diagnose.model import Finding, GroupContext, InstanceWindow, SnapshotError, Window
from fleet.diagnose.rules import KINDS, diagnose

__all__ = ["KINDS", "Finding", "GroupContext", "InstanceWindow", "SnapshotError", "Window", "diagnose"]
