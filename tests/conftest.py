"""pytest setup: put the repo root on sys.path so tests import ``data``, ``errors``, ... as the CLI does.

Run all tests from the repo root with ``python -m pytest -q``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tempfile  # noqa: E402

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

# Hypothesis also caches Unicode tables in its home folder (./.hypothesis by default): keep the
# repository clean by pointing it at the system temp folder.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "tinygpt-hypothesis")

# Property tests: the same examples on every machine (CI never flakes on a new random draw),
# no .hypothesis/ example database written into the repository, no per-example time limit
# (shared CI machines are noisy).
settings.register_profile(
    "tinygpt", derandomize=True, database=None, deadline=None, max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("tinygpt")
