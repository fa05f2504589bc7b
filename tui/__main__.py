"""`python -m tui`: the same entry point as the `gaplens` console script."""

import sys

from tui.cli import main

sys.exit(main())
