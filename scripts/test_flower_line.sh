#!/usr/bin/env bash
# The project's second Flower line, flwr 1.39 (SuperNodes reach the SuperLink's Fleet API
# over gRPC), in a virtualenv of its own (.venv-flwr1.39, constraints-1.39.txt): every
# unit test (the compose files' commands parsed by 1.39's own parsers, with
# docker-compose.flwr-1.39.yml), then the first engine tier on it: Fed-CVaR-Avg on the
# Simulation Engine (Message and legacy API) and on the Deployment Engine over TLS, each
# equal bit for bit to the in-process run. CI runs it after scripts/test_breadth.sh; the
# default line (constraints.txt) is what scripts/test.sh and the other tiers run.
# Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-flwr1.39
FLOWER_LINE=1.39 VENV=$venv bash scripts/setup.sh
"$venv/bin/python" -c "import flwr; print(f'flower line: flwr {flwr.__version__}')" >&2
status=0
"$venv/bin/pytest" -n auto -m "not flwr and not breadth" tests "$@" || status=$?
"$venv/bin/pytest" -m "flwr and not breadth" tests "$@" || status=$?
exit "$status"
