#!/usr/bin/env bash
# The second tier (CI runs it after scripts/test.sh): every case of tests/engines/cases.py
# on Flower's Simulation Engine and every algorithm on its Deployment Engine through the
# Message API, the legacy API on both, the fault cases (SIGKILL and SIGTERM of a run, a
# SuperNode killed mid-run, a SuperNode that cannot bind its port) and a sweep fanned out
# on Ray. One process: the runs share one Simulation and one Deployment federation and
# go on in the background while each test checks its own (tests/engines/background.py).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pytest -m breadth tests "$@"
