"""ServerApp: FedAvg, evaluated on the server's test set and by the clients."""

from __future__ import annotations

from flwr.common import Context, ndarrays_to_parameters
from flwr.server import ServerApp, ServerAppComponents, ServerConfig
from flwr.server.strategy import FedAvg
from task import accuracy, init_weights, load_data, loss_and_grad

X_TEST, Y_TEST = load_data(None)


def evaluate(server_round, parameters, config):
    """Centralised evaluation: loss and accuracy on the test set."""
    loss, _ = loss_and_grad(parameters[0], X_TEST, Y_TEST)
    return loss, {"accuracy": accuracy(parameters[0], X_TEST, Y_TEST)}


def server_fn(context: Context) -> ServerAppComponents:
    strategy = FedAvg(
        fraction_fit=1.0,
        fraction_evaluate=1.0,
        min_available_clients=3,
        initial_parameters=ndarrays_to_parameters([init_weights()]),
        evaluate_fn=evaluate,
    )
    config = ServerConfig(num_rounds=int(context.run_config["num-server-rounds"]))
    return ServerAppComponents(strategy=strategy, config=config)


app = ServerApp(server_fn=server_fn)
