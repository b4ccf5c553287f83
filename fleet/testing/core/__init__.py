"""Pieces shared by every faked product: clock, timers, parameter parsing, errors, faults, dispatch."""
