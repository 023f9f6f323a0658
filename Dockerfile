# One image for the SuperLink, the SuperNodes and the run submission of docker-compose.yml.
#
# Package versions come from one constraints file alone (flwr, torch, torchvision, ...):
# the image installs this project with its experiments extra under those constraints, as
# scripts/setup.sh does, into the virtualenv /opt/venv (first on PATH).
#
# Build arguments (the defaults are what users want):
#   CONSTRAINTS  the Flower line: constraints.txt (flwr 1.42, Fleet over HTTP) or
#                constraints-1.39.txt (flwr 1.39, Fleet over gRPC); docker-compose takes it
#                from FEDRAM_CONSTRAINTS (deploy/flwr-1.39.env sets it).
#   BASE_IMAGE   the Python 3.11 base image; any with `python3 -m venv` works, e.g. a Debian
#                bookworm root file system made by debootstrap and `docker import`ed
#                (scripts/test_docker.sh builds on one: no image registry needed).
#   TORCH_INDEX  the CPU-only torch/torchvision builds (x86_64 and aarch64, e.g. a Raspberry
#                Pi 4/5 with a 64-bit OS); their "+cpu" local versions satisfy the ==
#                constraints, and they need none of the CUDA packages listed there.
#   WHEELHOUSE   a local wheelhouse that replaces every index (`pip --no-index
#                --find-links`), for machines that cannot reach PyPI or the PyTorch index.
#                Wheels reach the build over loopback, so they never enter an image layer:
#       pip download -d wheels -c constraints.txt ".[experiments]" "setuptools>=68"
#       python3 -m http.server -b 127.0.0.1 -d wheels 8765 &
#       docker build --network host --build-arg WHEELHOUSE=http://127.0.0.1:8765/ .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
ARG CONSTRAINTS=constraints.txt
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG WHEELHOUSE=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
WORKDIR /app

# Dependencies first, in a layer that changes only with pyproject.toml and the constraints:
# the project's requirements (core and experiments extra, read from pyproject.toml), and
# setuptools to install the project itself below without any index.
COPY pyproject.toml $CONSTRAINTS /src/
RUN python3 -m venv /opt/venv \
 && python3 -c "import tomllib; p = tomllib.load(open('/src/pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['experiments']))" \
    > /tmp/requirements.txt \
 && if [ -n "$WHEELHOUSE" ]; then pip_source="--no-index --find-links $WHEELHOUSE"; \
    else pip_source="--extra-index-url $TORCH_INDEX"; fi \
 && pip install $pip_source -c "/src/$CONSTRAINTS" -r /tmp/requirements.txt "setuptools>=68" \
 && rm /tmp/requirements.txt

# The app itself: installed from /src (the installed copy serves the SuperNodes' and the
# SuperLink's processes), then staged to /app as a FAB holds it, strategies/ and clients/
# inside the package as installed. `flwr run /app` (service "submit") ships it to the
# SuperLink as a FAB.
COPY README.md LICENSE /src/
COPY fedram_flwr /src/fedram_flwr
COPY strategies /src/strategies
COPY clients /src/clients
COPY scenarios /src/scenarios
COPY deploy/healthcheck.py /src/deploy/healthcheck.py
RUN pip install --no-deps --no-build-isolation /src \
 && python -c "import pathlib, fedram_flwr.engines.flwr.staging as s; \
s.stage_app(pathlib.Path('/src'), pathlib.Path('/app'))" \
 && rm -rf /src
