"""Make the shared builders importable (pytest runs with --import-mode=importlib and no test packages)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
