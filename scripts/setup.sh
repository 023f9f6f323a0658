#!/usr/bin/env bash
# One-time set-up, idempotent: Fashion-MNIST from Debian (where apt exists), a virtualenv
# in .venv with the exact versions of constraints.txt, and this project installed in it
# (editable, with its experiments and dev extras).
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
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
stamp=.venv/.fedram-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  echo "setup: installing packages ($(grep -E '^(flwr|torch)==' constraints.txt | tr '\n' ' ')...)" >&2
  .venv/bin/pip install -q -c constraints.txt -e '.[experiments,dev]'
  touch "$stamp"
fi
