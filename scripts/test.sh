#!/usr/bin/env bash
# Set up, then run the linter and the test suite (a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# Four workers; the tests that start Flower's engines (marker flwr) form one xdist group
# (tests/conftest.py), so --dist loadgroup runs them one after another on one worker while
# the other three take the rest: Ray and Flower runs started together on a loaded machine
# time out (Ray's 30 s raylet start-up is hard-coded).
exec .venv/bin/pytest -n 4 --dist loadgroup tests "$@"
