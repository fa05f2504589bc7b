"""`python -m gaplens`: the same entry point as the `gaplens` console script."""

import sys

from gaplens.tui.cli import main

sys.exit(main())
