"""ServerApp for ``flwr run .`` (Simulation and Deployment Engines).

Run config: ``scenario`` (path inside the app, or absolute), ``seed``, ``overrides``
(``"algorithm.alpha=0.1,training.local_epochs=2"``) and ``run-dir`` (where results go;
default ``runs/flwr/<scenario>/seed<seed>`` under the working directory).
"""

from __future__ import annotations

from pathlib import Path

from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from fedram_flwr.app_config import run_settings
from fedram_flwr.engines.flwr.watchdog import OwnedRunDirectory
from fedram_flwr.engines.in_process import recording_strategy
from fedram_flwr.experiment import Experiment


def server_fn(context: Context) -> ServerAppComponents:
    scenario, seed = run_settings(context.run_config)
    run_dir = str(context.run_config.get("run-dir", "")) or f"runs/flwr/{scenario.name}/seed{seed}"
    out = OwnedRunDirectory(Path(run_dir).resolve())  # no `complete` from an orphan
    out.start(scenario.to_dict(), seed, engine="flwr")
    print(f"fedram: writing results to {out.path}", flush=True)
    exp = Experiment(scenario, seed)
    manager = exp.client_manager()
    return ServerAppComponents(
        strategy=recording_strategy(exp, out, f"[{scenario.name} seed {seed}]"),
        config=ServerConfig(num_rounds=scenario.rounds, round_timeout=manager.round_timeout),
        client_manager=manager,
    )


app = ServerApp(server_fn=server_fn)
