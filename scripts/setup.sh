#!/usr/bin/env bash
# One-time set-up, idempotent: Fashion-MNIST from Debian (where apt exists), a virtualenv
# in .venv with the exact versions of constraints.txt (the default Flower line, flwr 1.42),
# and this project installed in it (editable, with its experiments and dev extras).
#   FLOWER_LINE=1.39 bash scripts/setup.sh   the second line instead (constraints-1.39.txt,
#                                            flwr 1.39, Fleet over gRPC); later set-ups
#                                            (demo.sh, test.sh) keep the line installed;
#   FLOWER_LINE=1.42 bash scripts/setup.sh   back to the default line
#   VENV=DIR                                 the virtualenv to set up (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages, where apt-get exists: Fashion-MNIST, and docker-compose (v1), which
# validates docker-compose.yml offline in the tests (no Docker engine needed).
apt_packages=()
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || apt_packages+=(dataset-fashion-mnist)
command -v docker-compose >/dev/null || apt_packages+=(docker-compose)
if [ ${#apt_packages[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing Debian's ${apt_packages[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    $SUDO apt-get install -y -qq "${apt_packages[@]}" >/dev/null \
    || echo "setup: could not install ${apt_packages[*]}; torchvision will try to download" \
            "Fashion-MNIST, tests/test_compose.py skips outside CI" >&2
fi

PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp=$VENV/.fedram-installed  # holds the constraints file it was installed with
case "${FLOWER_LINE:-}" in
  "") constraints=$( [ -s "$stamp" ] && cat "$stamp" || echo constraints.txt ) ;;
  1.42) constraints=constraints.txt ;;
  1.39) constraints=constraints-1.39.txt ;;
  *) echo "setup: FLOWER_LINE must be 1.42 (the default line) or 1.39, not '$FLOWER_LINE'" >&2
     exit 2 ;;
esac
[ -f "$constraints" ] || constraints=constraints.txt
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$constraints" ] \
   || [ pyproject.toml -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ]; then
  echo "setup: installing packages into $VENV ($(grep -E '^(flwr|torch)==' "$constraints" | tr '\n' ' ')...)" >&2
  "$VENV/bin/pip" install -q -c "$constraints" -e '.[experiments,dev]'
  echo "$constraints" > "$stamp"
fi
