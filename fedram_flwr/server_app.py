"""ServerApp for ``flwr run .`` (Simulation and Deployment Engines), in either Flower API.

Run config: ``scenario`` (path inside the app, or absolute), ``seed``, ``overrides``
(``"algorithm.alpha=0.1,training.local_epochs=2"``), ``run-dir`` (where results go;
default ``runs/flwr/<scenario>/seed<seed>`` under the working directory), ``run-token``
(the lock token of the process that drives the run, which the ServerApp checks before
every write; empty: the ServerApp takes the run folder's lock itself), ``wait-timeout``
(seconds the oracle waits for the nodes to connect and answer the partition-id query;
default 120 s; ``fedram run`` gives the run's whole time limit, since it
watches its SuperNodes itself) and ``api``:

- ``message`` (default): the algorithm's Message-API strategy
  (:mod:`fedram_flwr.message_api.algorithms`) under the scenario's oracle
  (:func:`~fedram_flwr.message_api.with_availability`), Flower's own ``start`` loop on
  the grid, recorded by :class:`~fedram_flwr.engines.MessageRecordingStrategy`; an
  asynchronous algorithm (FedBuff) runs its own strategy's push-and-pull loop instead
  (:func:`~fedram_flwr.engines.fedbuff_message.serve_fedbuff_messages`);
- ``legacy``: the legacy Strategy and oracle (ClientManager) in Flower's legacy server
  loop, through ``flwr.server.compat.start_grid`` (what ``ServerApp(server_fn=...)`` runs);
  FedBuff's legacy face is its own ``Server`` whose ``fit`` runs its loop on the simulated
  clock (:class:`~fedram_flwr.engines.fedbuff_server.FedBuffServer`).

Flower 1.39's ``ServerApp`` takes either a ``server_fn`` or a ``@app.main()``, never both,
and pyproject names one ServerApp; so ``app`` is a ``@app.main()`` that runs either. The
project's ClientApp (``client_app.message_app``) answers both APIs' messages. Both write
the same run folder (files, rows, fingerprint with the API), under the driver's token.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import ArrayRecord, Context
from flwr.server import ServerAppComponents, ServerConfig
from flwr.server.compat import start_grid
from flwr.serverapp import Grid, ServerApp

from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.fedbuff_in_process import fedbuff_server
from fedram_flwr.engines.fedbuff_message import serve_fedbuff_messages
from fedram_flwr.engines.flwr.watchdog import OwnedRunDirectory
from fedram_flwr.engines.in_process import recorder_settings, recording_strategy
from fedram_flwr.engines.message_in_process import project_evaluate
from fedram_flwr.engines.message_recording import MessageRecordingStrategy
from fedram_flwr.engines.server import StrategyEveryRound
from fedram_flwr.engines.timed import TimedServer, message_availability, time_model
from fedram_flwr.registry import is_asynchronous
from fedram_flwr.registry.app_config import APIS, run_api, run_settings

DEFAULT_ROUND_TIMEOUT_S = 3600.0
"""A Message-API round's wait for replies when the oracle sets no ``round_timeout``
(Flower's ``start`` default)."""


def start_run(context: Context, api: str) -> tuple[OwnedRunDirectory, Experiment, str]:
    """The run folder (started under the driver's token), the experiment, its label."""
    scenario, seed = run_settings(context.run_config)
    run_dir = str(context.run_config.get("run-dir", "")) or f"runs/flwr/{scenario.name}/seed{seed}"
    out = OwnedRunDirectory(Path(run_dir).resolve())  # no `complete` from an orphan
    token = str(context.run_config.get("run-token", ""))
    out.start(scenario.to_dict(), seed, engine="flwr", token=token, api=api)
    print(f"fedram: writing results to {out.path} ({api} API)", flush=True)
    return out, Experiment(scenario, seed), f"[{scenario.name} seed {seed}]"


def run_oracle(exp: Experiment, context: Context) -> OracleClientManager:
    """The scenario's oracle, waiting the run config's ``wait-timeout`` for the nodes."""
    oracle = exp.client_manager()
    oracle.wait_timeout = float(context.run_config.get("wait-timeout", oracle.wait_timeout))
    return oracle


def server_fn(context: Context) -> ServerAppComponents:
    """The legacy components: the recorded Strategy, the oracle, the engines' server."""
    out, exp, label = start_run(context, "legacy")
    manager = run_oracle(exp, context)
    config = ServerConfig(num_rounds=exp.scenario.rounds, round_timeout=manager.round_timeout)
    if is_asynchronous(exp.scenario):  # FedBuff: its own server loop, no rounds
        return ServerAppComponents(server=fedbuff_server(exp, manager, out, label), config=config)
    strategy = recording_strategy(exp, out, label)
    # the in-process engine's server loop: an empty round still reaches the strategy
    server = StrategyEveryRound(client_manager=manager, strategy=strategy)
    if exp.scenario.time is not None:  # on the simulated clock, under the round policy
        model = time_model(exp, manager)
        server = TimedServer(time=model, seed=exp.seed, client_manager=manager, strategy=strategy)
    return ServerAppComponents(server=server, config=config)


def serve_messages(grid: Grid, context: Context) -> None:
    """The Message-API run on ``grid``: Flower's ``start`` of the recorded, wrapped
    strategy from the scenario's initial model."""
    out, exp, label = start_run(context, "message")
    if is_asynchronous(exp.scenario):  # FedBuff: push and pull, no rounds
        wait = float(context.run_config.get("wait-timeout", 120.0))
        serve_fedbuff_messages(exp, out, label, grid, wait_timeout=wait)
        return
    strategy = exp.message_strategy()
    oracle = run_oracle(exp, context)
    available = message_availability(exp, strategy, oracle)
    recorder = MessageRecordingStrategy(
        available,
        out,
        partition_of=lambda node: available.partition_of[node],  # learnt in round 1
        num_clients=exp.scenario.data.num_clients,
        evaluate=project_evaluate(exp, strategy),
        **recorder_settings(exp, label),
    )
    recorder.start(
        grid=grid,
        initial_arrays=ArrayRecord(get_weights(exp.new_model())),
        timeout=oracle.round_timeout or DEFAULT_ROUND_TIMEOUT_S,
    )


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The run config's ``api``: Message API (default) or legacy."""
    if run_api(context.run_config.get("api", APIS[0])) == "message":
        serve_messages(grid, context)
        return
    components = server_fn(context)
    start_grid(grid=grid, server=components.server, config=components.config)
