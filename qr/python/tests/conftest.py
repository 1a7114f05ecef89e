import os
import sys

# The host package (qrhost) and the harness, importable by the suites.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import artifacts  # noqa: E402,F401 - a fixture every suite can ask for
