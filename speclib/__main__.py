"""``python -m speclib``: the command-line interface (see :mod:`speclib.cli`)."""

import sys

from speclib.cli import main

if __name__ == "__main__":
    sys.exit(main())
