"""ServerApp for ``flwr run .`` (Simulation and Deployment Engines).

Run config: ``scenario`` (path inside the app, or absolute), ``seed``, ``overrides``
(``"algorithm.alpha=0.1,training.local_epochs=2"``), ``run-dir`` (where results go;
default ``runs/flwr/<scenario>/seed<seed>`` under the working directory) and ``run-token``
(the lock token of the process that drives the run, which the ServerApp checks before
every write; empty: the ServerApp takes the run folder's lock itself).
"""

from __future__ import annotations

from pathlib import Path

from flwr.common import Context
from flwr.server import ServerApp, ServerAppComponents, ServerConfig

from fedram_flwr.app_config import run_settings
from fedram_flwr.engines.flwr.watchdog import OwnedRunDirectory
from fedram_flwr.engines.in_process import recording_strategy
from fedram_flwr.engines.server import StrategyEveryRound
from fedram_flwr.experiment import Experiment


def server_fn(context: Context) -> ServerAppComponents:
    scenario, seed = run_settings(context.run_config)
    run_dir = str(context.run_config.get("run-dir", "")) or f"runs/flwr/{scenario.name}/seed{seed}"
    out = OwnedRunDirectory(Path(run_dir).resolve())  # no `complete` from an orphan
    token = str(context.run_config.get("run-token", ""))
    out.start(scenario.to_dict(), seed, engine="flwr", token=token)
    print(f"fedram: writing results to {out.path}", flush=True)
    exp = Experiment(scenario, seed)
    manager = exp.client_manager()
    strategy = recording_strategy(exp, out, f"[{scenario.name} seed {seed}]")
    return ServerAppComponents(
        # the in-process engine's server loop: an empty round still reaches the strategy
        server=StrategyEveryRound(client_manager=manager, strategy=strategy),
        config=ServerConfig(num_rounds=scenario.rounds, round_timeout=manager.round_timeout),
    )


app = ServerApp(server_fn=server_fn)
