"""``python -m qrhost`` (what ``qr/python/serve`` runs)."""

import sys

from .server import main

sys.exit(main())
