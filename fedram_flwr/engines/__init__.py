"""Engines that run one (scenario, seed) and record it in a run directory.

``in_process``: Flower's legacy server loop with the clients called in this process (no
Ray, no network). ``flwr``: Flower's Simulation and Deployment Engines through ``flwr
run .`` (a private SuperLink, and SuperNode processes in the Deployment Engine).
"""

from fedram_flwr.engines.flwr import (
    DEPLOYMENT_LATENCY_ENV,
    ENGINES,
    Engine,
    FlwrRunError,
    TlsFiles,
    generate_tls_files,
    run_with_flwr,
)
from fedram_flwr.engines.in_process import (
    InProcessClientProxy,
    node_context,
    recording_strategy,
    run_in_process,
)

__all__ = [
    "DEPLOYMENT_LATENCY_ENV",
    "ENGINES",
    "Engine",
    "FlwrRunError",
    "InProcessClientProxy",
    "TlsFiles",
    "generate_tls_files",
    "node_context",
    "recording_strategy",
    "run_in_process",
    "run_with_flwr",
]
