"""``python -m eval <subcommand>``: the project's command line."""

import sys

from eval.cli import main

sys.exit(main())
