"""`make bench`: every benchmark in one run (speed targets live here, never in timed tests)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    "sizing",
    "autoscale",
    "level_oracle",
    "diagnose",
    "fake_cloud",
    "service",
    "tick_forecast",
    "service_scale",
    "console",
]


def main() -> int:
    status = 0
    for name in BENCHMARKS:
        print(f"== benchmark: {name}", flush=True)
        module = importlib.import_module(f"benchmarks.{name}")
        status |= int(module.main() or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
