"""``python -m rip_bench``: see :mod:`rip_bench.cli`."""

import sys

from rip_bench.cli import main

sys.exit(main())
