"""The diagnosis benchmark's runner and scoring (`fleet bench diagnose`, `make bench` through
benchmarks/diagnose.py): findings against simulator ground truth.

Each labelled scenario of :mod:`fleet.sim.diagnose_scenarios` runs in the simulator (fault injection and
workload shapes produce its cause on purpose), the window the simulated instances published to the fake
CloudMonitor is read back through the same reader ``fleet diagnose`` uses, and the findings are scored:

* per scenario: the expected kind, the kinds found, whether the expected one was found (a hit) and which
  other kinds were reported (false findings);
* recall: scenarios with a cause whose kind was found / scenarios with a cause;
* precision: findings of the right kind / all findings (a kind counted once per scenario), healthy controls
  included, where every finding is false.

Targets (issue 10): recall and precision at least 90%, and no finding at all on a healthy control. It ships in
the package (not only in the repository's benchmarks/) so that the command works from an installed wheel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

TARGET_RECALL = 0.9
TARGET_PRECISION = 0.9


def score(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Recall, precision and the verdict from per-scenario rows (``expected``, ``found``)."""
    labelled = [r for r in rows if r["expected"] is not None]
    hits = sum(1 for r in labelled if r["expected"] in r["found"])
    reported = sum(len(set(r["found"])) for r in rows)
    correct = sum(1 for r in labelled if r["expected"] in r["found"])
    recall = hits / len(labelled) if labelled else 1.0
    precision = correct / reported if reported else 1.0
    controls_clean = all(not r["found"] for r in rows if r["expected"] is None)
    return {
        "recall": round(recall, 3),
        "precision": round(precision, 3),
        "scenario_count": len(rows),
        "labelled": len(labelled),
        "controls": len(rows) - len(labelled),
        "controls_clean": controls_clean,
        "passed": recall >= TARGET_RECALL and precision >= TARGET_PRECISION and controls_clean,
    }


def run(
    names: Sequence[str] | None = None, progress: Callable[[str], Any] | None = None, seeds: int = 1
) -> dict[str, Any]:
    """Run the scenarios (all, or ``names``) and score them: ``{scenarios: [...], recall, precision}``.

    ``seeds`` > 1 repeats each scenario with other workload seeds (``seed + 101 k``): a robustness check of
    the same causes under different arrivals, scored together."""
    from dataclasses import replace

    from fleet.sim.diagnose_run import run_scenario
    from fleet.sim.diagnose_scenarios import SCENARIOS

    rows: list[dict[str, Any]] = []
    wall0 = time.perf_counter()
    runs = [
        replace(sc, seed=sc.seed + 101 * k)
        for sc in SCENARIOS
        if not names or sc.name in names
        for k in range(seeds)
    ]
    for sc in runs:
        if progress is not None:
            progress(f"running {sc.name} (seed {sc.seed})")
        t0 = time.perf_counter()
        result = run_scenario(sc)
        found = list(dict.fromkeys(f.kind for f in result.findings))
        rows.append(
            {
                "scenario": sc.name,
                "seed": sc.seed,
                "description": sc.description,
                "expected": sc.expected,
                "found": found,
                "hit": sc.expected in found if sc.expected else not found,
                "false": [k for k in found if k != sc.expected],
                "findings": [f.to_json() for f in result.findings],
                "simulated_minutes": sc.minutes,
                "window_minutes": sc.window_minutes,
                "requests": result.stats.get("requests"),
                "wall_s": round(time.perf_counter() - t0, 2),
            }
        )
    return {"scenarios": rows, **score(rows), "wall_s": round(time.perf_counter() - wall0, 1)}


def print_report(report: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    table = Table(title="diagnosis against simulator ground truth")
    for col in ("scenario", "seed", "expected", "found", "ok"):
        table.add_column(col)
    for r in report["scenarios"]:
        ok = "[green]yes[/]" if r["hit"] and not r["false"] else "[red]no[/]"
        table.add_row(
            r["scenario"], str(r["seed"]), r["expected"] or "(healthy)", ", ".join(r["found"]) or "-", ok
        )
    con.print(table)
    con.print(
        f"recall {report['recall']:.0%} (target {TARGET_RECALL:.0%}), precision {report['precision']:.0%} "
        f"(target {TARGET_PRECISION:.0%}), healthy controls clean: {report['controls_clean']}; "
        f"{report['wall_s']:.0f} s wall"
    )
