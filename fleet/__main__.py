"""``python -m fleet``: the ``fleet`` command, for an environment without its script on PATH."""

import sys

from fleet.cli import main

if __name__ == "__main__":
    sys.exit(main())
