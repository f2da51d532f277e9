"""``python -m rip_control.evaluate``, kept where users type it.

The code is in :mod:`rip_control.run.evaluate`.
"""

import sys

from rip_control.run.evaluate import main

if __name__ == '__main__':
    sys.exit(main())
