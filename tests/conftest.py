"""Settings for the whole test session."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests judge what a function returns, never how long it takes: Hypothesis's default 200 ms deadline
# per example failed a one-line percentile once on a machine busy with the other test worker.
settings.register_profile("fleet", deadline=None)
settings.load_profile("fleet")

# The CLI keeps the width a user sets in COLUMNS and gives piped output PIPE_WIDTH otherwise
# (fleet/commands/_common.py); the tests read piped output, so they run as a pipe with no COLUMNS. Under
# pytest-xdist the workers start with COLUMNS=80, which would cut the tables the tests check whole.
os.environ.pop("COLUMNS", None)


@pytest.fixture(autouse=True)
def no_wall_clock_call_budget(monkeypatch):
    """The services a test builds in-process call the in-process fake without the wall-clock request budget
    (``fleet.service.pool``'s token buckets, 40 calls/s with bursts of 10), as the simulator's service does.
    A test ticks back to back where production ticks every 15 s and refills the buckets between ticks: with
    them, every tick past the first few slept a quarter of a second, a quarter hour of ticks 20 s. The
    buckets' own tests build ``CallPools`` themselves; the subprocess end-to-end tests keep the budget."""
    import fleet.service.loop as loop

    built = loop.CallPools
    monkeypatch.setattr(loop, "CallPools", lambda **kw: built(**{**kw, "rate_limited": False}))
