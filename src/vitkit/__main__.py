"""`python -m vitkit ...` (and `torchrun -m vitkit train ...`)."""

import sys

from vitkit.cli import main

sys.exit(main())
