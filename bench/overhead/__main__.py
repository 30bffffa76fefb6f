"""``python -m bench.overhead``: see ``bench.overhead.cli``."""

import sys

from bench.overhead.cli import main

sys.exit(main())
