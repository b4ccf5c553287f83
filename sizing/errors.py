"""The one error the sizing core raises for bad input: the shell turns it into one line and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SizingInputError(ValueError):
    """Input the sizing model cannot use (unknown name, impossible parallelism, malformed config).

    The message is one line, written for the person who typed the input.
    """


def nearest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The closest valid names to ``name`` (case-insensitive), best first."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.4)
    if not hits:
        # fall back to names sharing a prefix, so "qwen" still points somewhere useful
        hits = [c for c in lowered if c.startswith(name.lower()[:3])][:n]
    return [lowered[h] for h in hits]


def unknown(kind: str, name: str, choices: Iterable[str]) -> SizingInputError:
    """An 'unknown X' error naming the nearest valid names."""
    choices = list(choices)
    near = nearest(name, choices)
    hint = f"; nearest: {', '.join(near)}" if near else f"; known: {', '.join(sorted(choices)[:8])}, ..."
    return SizingInputError(f"unknown {kind} {name!r}{hint}")
