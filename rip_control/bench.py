"""``python -m rip_control.bench``, kept where users type it.

The code is in :mod:`rip_control.benchmarks.bench`.
"""

import sys

from rip_control.benchmarks.bench import main

if __name__ == '__main__':
    sys.exit(main())
