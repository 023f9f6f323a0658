#!/usr/bin/env bash
# docker-compose for real: a private dockerd (its own data and exec roots under a
# temporary folder, --iptables=false --bridge=none), a Debian base image from debootstrap,
# this project's image built from a copy of the working tree, and two docker-compose
# runs in containers on the host's network (plain; TLS with one SuperNode container
# killed), each checked against the in-process engine, on the default Flower line
# (FLOWER_LINE=1.39 bash scripts/test_docker.sh: on 1.39, with docker-compose.flwr-1.39.yml). Everything it starts or creates is removed,
# also on failure. Not part of the few-minute suite: CI runs it after scripts/test.sh.
# Without root, dockerd, docker-compose or debootstrap it says so and skips.
# Takes 10-20 minutes (3 GB of wheels, a 6.7 GB image); figures: runs/test_docker/summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
# FLOWER_LINE=1.39: the second line's image and compose override, checked against the
# in-process runs of its own virtualenv (.venv-flwr1.39, as scripts/test_flower_line.sh)
venv=.venv
[ "${FLOWER_LINE:-}" = 1.39 ] && venv=.venv-flwr1.39
VENV=$venv bash scripts/setup.sh
if ! command -v debootstrap >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
  echo "test_docker: installing Debian's debootstrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || echo "test_docker: could not install debootstrap" >&2
fi
FEDRAM_DOCKER_E2E=1 exec "$venv/bin/pytest" -p no:cacheprovider -rs -s -v tests/docker "$@"
