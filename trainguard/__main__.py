"""``python -m trainguard`` is the ``trainguard`` command."""

from __future__ import annotations

import sys

from trainguard.cli import main

sys.exit(main())
