"""``python -m lab COMMAND``: the lab's commands (:mod:`lab.cli`)."""

import sys

from lab.cli import main

sys.exit(main())
