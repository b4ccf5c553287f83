"""Settings for the whole test session."""

from __future__ import annotations

import os

# The CLI keeps the width a user sets in COLUMNS and gives piped output PIPE_WIDTH otherwise
# (fleet/commands/_common.py); the tests read piped output, so they run as a pipe with no COLUMNS. Under
# pytest-xdist the workers start with COLUMNS=80, which would cut the tables the tests check whole.
os.environ.pop("COLUMNS", None)
