#!/usr/bin/env bash
# Set up, then run the linter and the test suite; extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# 1. Everything but the tests that start Flower's engines, on four workers.
# 2. The tests that start Flower's engines (marker flwr: SuperLinks, SuperNodes, Ray), one
#    at a time in one process: started together on a loaded 2-core machine they missed
#    Ray's hard-coded 30 s raylet start-up, and Deployment SuperExecs piled up hundreds
#    of ClientApp processes until memory ran out. (xdist's --dist loadgroup cannot keep
#    them apart: with pytest 9.2 its group suffix is ignored, checked with xdist 3.8.0.)
status=0
.venv/bin/pytest -n 4 -m "not flwr" tests "$@" || status=$?
.venv/bin/pytest -m flwr tests "$@" || status=$?
exit "$status"
