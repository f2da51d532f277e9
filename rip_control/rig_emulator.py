"""``python -m rip_control.rig_emulator``, kept where users type it.

The code is in :mod:`rip_control.rig.emulator`.
"""

import sys

from rip_control.rig.emulator import main

if __name__ == '__main__':
    sys.exit(main())
