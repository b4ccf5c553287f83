"""The diagnosis benchmark (`fleet bench diagnose`, `make bench`): findings against simulator ground truth.

The scenarios, the runner and the scoring (targets: recall and precision at least 90%, no finding on a healthy
control) live in :mod:`fleet.sim.diagnose_bench`, inside the package, so that `fleet bench diagnose`
works from an installed wheel; this file is the `make bench` entry.
"""

from __future__ import annotations

import sys

from fleet.sim.diagnose_bench import TARGET_PRECISION, TARGET_RECALL, print_report, run, score

__all__ = ["TARGET_PRECISION", "TARGET_RECALL", "main", "print_report", "run", "score"]


def main() -> int:
    report = run(progress=lambda m: print(m, flush=True))
    print_report(report)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
