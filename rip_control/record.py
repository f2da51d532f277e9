"""``python -m rip_control.record``, kept where users type it.

The code is in :mod:`rip_control.ros.record`.
"""

import sys

from rip_control.ros.record import main

if __name__ == '__main__':
    sys.exit(main())
