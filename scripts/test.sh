#!/usr/bin/env bash
# The first tier, what a contributor runs before pushing (the README's test command): set
# up, ruff, then
# 1. every test that starts no Flower engine, on a worker per core (pytest-xdist; on two
#    cores four workers took 61 s against 38 s for two);
# 2. the engine tests of this tier (marker flwr, not breadth) in one process: the tiny
#    Fed-CVaR-Avg case on Flower's Simulation Engine (Message and legacy API) and on the
#    Deployment Engine (TLS), each compared bit for bit with the in-process run. Those
#    runs share their federations (tests/engines/background.py), which is why they run
#    in one process, apart from the workers.
# The second tier (scripts/test_breadth.sh) and the container test (scripts/test_docker.sh)
# run in CI (.ci/run). Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
status=0
.venv/bin/pytest -n auto -m "not flwr and not breadth" tests "$@" || status=$?
.venv/bin/pytest -m "flwr and not breadth" tests "$@" || status=$?
exit "$status"
