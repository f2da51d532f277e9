"""``python -m rip_control.control_node``, kept where users type it.

The code is in :mod:`rip_control.ros.control_node`.
"""

import sys

from rip_control.ros.control_node import main

if __name__ == '__main__':
    sys.exit(main())
