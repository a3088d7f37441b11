"""``python -m meshnb.conformance ops|pack|check ...``."""

import sys

from .cli import main

sys.exit(main())
