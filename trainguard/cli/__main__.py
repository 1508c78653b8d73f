"""``python -m trainguard.cli``, the same as the ``trainguard`` command."""

import sys

from trainguard.cli import main

sys.exit(main())
