"""``python -m rip_control.finetune``, kept where users type it.

The code is in :mod:`rip_control.run.finetune`.
"""

import sys

from rip_control.run.finetune import main

if __name__ == '__main__':
    sys.exit(main())
