"""``python -m tether.runtime.ops``: the ``tether`` command, for an environment without its script."""

import sys

from ._cli import main

sys.exit(main())
