#!/usr/bin/env bash
# The tracking tier (CI runs it after the others): the `tracking` extra (tensorboard,
# mlflow, wandb: about 570 MB and 60 packages on top of the experiments extra, so
# scripts/setup.sh leaves it out) installed into .venv with the exact versions of the
# line's constraints file, then tests/tracking, whose read-back tests skip without it.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
constraints=$(cat .venv/.fedram-installed)
if ! .venv/bin/python -c 'import tensorboard, mlflow, wandb' 2>/dev/null; then
  echo "test_tracking: installing the tracking extra into .venv (-c $constraints)" >&2
  .venv/bin/pip install -q -c "$constraints" -e '.[experiments,dev,tracking]'
fi
exec .venv/bin/pytest -p no:cacheprovider tests/tracking "$@"
