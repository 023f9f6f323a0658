# One image for the SuperLink, the SuperNodes and the run submission of docker-compose.yml.
#
# Package versions come from constraints.txt alone (flwr 1.39.0, torch, torchvision, ...):
# the image installs this project with its experiments extra under those constraints, as
# scripts/setup.sh does. TORCH_INDEX supplies the CPU-only torch/torchvision builds (x86_64
# and aarch64, e.g. a Raspberry Pi 4/5 with a 64-bit OS); their "+cpu" local versions
# satisfy the == constraints, and they need none of the CUDA packages listed there.
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
WORKDIR /app

# Dependencies first, in a layer that changes only with pyproject.toml and constraints.txt:
# install the project from empty stubs of its packages, then drop the stubs.
COPY pyproject.toml README.md constraints.txt ./
RUN mkdir fedram_flwr strategies clients \
 && touch fedram_flwr/__init__.py strategies/__init__.py clients/__init__.py \
 && pip install --extra-index-url "$TORCH_INDEX" -c constraints.txt ".[experiments]" \
 && pip uninstall -y fedram-flwr \
 && rm -rf fedram_flwr strategies clients build ./*.egg-info

# The app itself: installed from /src (the installed copy serves the SuperNodes' and the
# SuperLink's processes), then staged to /app as a FAB holds it, strategies/ and clients/
# inside the package as installed. `flwr run /app` (service "submit") ships it to the
# SuperLink as a FAB.
COPY fedram_flwr /src/fedram_flwr
COPY strategies /src/strategies
COPY clients /src/clients
COPY scenarios /src/scenarios
COPY deploy/healthcheck.py /src/deploy/healthcheck.py
RUN cp pyproject.toml README.md constraints.txt /src/ \
 && pip install --no-deps /src \
 && python -c "import pathlib, fedram_flwr.engines.flwr.staging as s; \
s.stage_app(pathlib.Path('/src'), pathlib.Path('/app'))" \
 && rm -rf /src
