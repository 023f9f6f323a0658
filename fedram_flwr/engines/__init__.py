"""Engines that run one (scenario, seed) and record it in a run directory.

``in_process``: Flower's legacy server loop with the clients called in this process (no
Ray, no network); ``fedbuff_in_process``: FedBuff's asynchronous event loop over the same
clients (``fedbuff_message``: its Message-API strategy, on the in-process grid or
Flower's); ``message_in_process``: the same for Flower's Message API (a strategy's
``start`` over ``grid.InProcessGrid``, recorded by ``message_recording``; by default the
scenario's own Message-API strategy, oracle and ClientApp: ``project_components``). ``flwr``:
Flower's Simulation and Deployment Engines through ``flwr run .`` (a private SuperLink,
and SuperNode processes in the Deployment Engine, per run or shared by many:
``Federation``).
"""

from fedram_flwr.engines.fedbuff_in_process import run_fedbuff_in_process
from fedram_flwr.engines.flwr import (
    DEPLOYMENT_LATENCY_ENV,
    ENGINES,
    Engine,
    Federation,
    FlwrRunError,
    TlsFiles,
    generate_tls_files,
    run_with_flwr,
)
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.engines.in_process import (
    InProcessClientProxy,
    node_context,
    recording_strategy,
    run_in_process,
)
from fedram_flwr.engines.message_in_process import (
    MessageComponents,
    project_components,
    run_message_in_process,
)
from fedram_flwr.engines.message_recording import MessageRecordingStrategy

__all__ = [
    "DEPLOYMENT_LATENCY_ENV",
    "ENGINES",
    "Engine",
    "Federation",
    "FlwrRunError",
    "InProcessClientProxy",
    "InProcessGrid",
    "MessageComponents",
    "MessageRecordingStrategy",
    "TlsFiles",
    "generate_tls_files",
    "node_context",
    "project_components",
    "recording_strategy",
    "run_fedbuff_in_process",
    "run_in_process",
    "run_message_in_process",
    "run_with_flwr",
]
