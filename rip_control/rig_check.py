"""``python -m rip_control.rig_check``, kept where users type it.

The code is in :mod:`rip_control.rig.check`.
"""

import sys

from rip_control.rig.check import main

if __name__ == '__main__':
    sys.exit(main())
