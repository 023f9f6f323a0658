"""Flower's Simulation and Deployment Engines driven through ``flwr run .``.

``run`` drives one run (starting it again when Ray fails to start); ``federation`` is a
SuperLink (and SuperNodes) kept up for one run or many; ``session`` is one attempt in
progress on it; ``processes`` tracks and stops what it started; ``tls`` makes a
throwaway CA; ``staging`` lays the app out as a FAB; ``health`` waits for the SuperLink;
``signals`` keeps the cleanup running through Ctrl-C and SIGTERM; ``errors`` reports.
"""

from fedram_flwr.engines.flwr.errors import FlwrRunError, root_cause
from fedram_flwr.engines.flwr.federation import Federation
from fedram_flwr.engines.flwr.run import (
    DEPLOYMENT_LATENCY_ENV,
    ENGINES,
    Engine,
    run_with_flwr,
)
from fedram_flwr.engines.flwr.staging import stage_app
from fedram_flwr.engines.flwr.tls import TlsFiles, generate_tls_files

__all__ = [
    "DEPLOYMENT_LATENCY_ENV",
    "ENGINES",
    "Engine",
    "Federation",
    "FlwrRunError",
    "TlsFiles",
    "generate_tls_files",
    "root_cause",
    "run_with_flwr",
    "stage_app",
]
