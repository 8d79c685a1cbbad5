"""``python -m speclib``: the command-line interface (see :mod:`speclib.app.cli`)."""

import sys

from speclib.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
