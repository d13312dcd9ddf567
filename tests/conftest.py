"""pytest setup: put the repo root on sys.path so tests import ``data``, ``errors``, ... as the CLI does.

Run all tests from the repo root with ``python -m pytest -q``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
