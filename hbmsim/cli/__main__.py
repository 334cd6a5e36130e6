"""`python -m hbmsim.cli`: the `hbmsim` command."""

import sys

from .commands import main

sys.exit(main())
