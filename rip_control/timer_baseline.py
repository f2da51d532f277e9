"""``python -m rip_control.timer_baseline``, kept where users type it.

The code is in :mod:`rip_control.benchmarks.timer_baseline`.
"""

import sys

from rip_control.benchmarks.timer_baseline import main

if __name__ == '__main__':
    sys.exit(main())
