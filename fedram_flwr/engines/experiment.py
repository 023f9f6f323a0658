"""The composition root: a scenario and a seed -> data, oracle, strategy and clients.

Every engine builds its Flower objects here, through the registry's specs (their class
references; nothing is looked up by string). The scenario comes validated from
:mod:`fedram_flwr.registry`; building may still raise for what only the data can tell
(rFedFair's alpha_i >= p_i)."""

from __future__ import annotations

import numpy as np
from flwr.app import MetricRecord
from flwr.common import Metrics, RecordDict
from flwr.server.strategy import Strategy
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.clients.evaluation import EvaluateFn, make_evaluate_fn
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.node import NodeExperiment, rare_clients
from fedram_flwr.protocol import SERVER_ROUND
from fedram_flwr.registry import algorithm_params, algorithm_spec, oracle_params, oracle_spec
from fedram_flwr.registry.specs import RoundLaw
from fedram_flwr.scenario.config import Scenario

__all__ = [
    "Experiment",
    "availability_law",
    "build_oracle",
    "known_availability",
    "rare_clients",
    "weighted_mean_metrics",
    "weighted_mean_records",
]


def weighted_mean_metrics(results: list[tuple[int, Metrics]]) -> Metrics:
    """Example-weighted mean of every numeric fit metric (Flower's metrics hook)."""
    total = sum(n for n, _ in results)
    keys = {k for _, m in results for k, v in m.items() if isinstance(v, (int, float))}
    return {k: sum(n * float(m[k]) for n, m in results if k in m) / total for k in sorted(keys)}


def weighted_mean_records(contents: list[RecordDict], weighted_by_key: str) -> MetricRecord:
    """:func:`weighted_mean_metrics` of Message-API replies (Flower's
    ``train_metrics_aggr_fn``): each reply's one ``MetricRecord``, weighted by its
    ``weighted_by_key`` (left out of the means, as the legacy rows have it)."""
    records = [next(iter(c.metric_records.values())) for c in contents]
    weighted = [
        (int(r[weighted_by_key]), {k: v for k, v in r.items() if k != weighted_by_key})
        for r in records
    ]  # m_i is the weight, as a legacy FitRes's num_examples, not a metric
    return MetricRecord(weighted_mean_metrics(weighted))


def build_oracle(scenario: Scenario, seed: int) -> OracleClientManager:
    """A fresh ClientManager of the scenario's oracle (its draws depend only on
    (seed, round))."""
    return oracle_spec(scenario).build(oracle_params(scenario), scenario, seed)


def availability_law(scenario: Scenario, seed: int) -> np.ndarray:
    """Each client's long-run availability under the scenario's oracle: for plots, and
    for strategies only when the scenario runs them oracle-informed."""
    return oracle_spec(scenario).law(oracle_params(scenario), scenario, seed)


def known_availability(scenario: Scenario, seed: int) -> np.ndarray | RoundLaw:
    """What an oracle-informed algorithm that knows p_i^t reads (FedAvg-IS): the oracle's
    per-round law, server round -> p_i^t, where it has one (``nonstationary``), else
    :func:`availability_law` itself (every stationary oracle)."""
    return oracle_spec(scenario).known_law(oracle_params(scenario), scenario, seed)


class Experiment(NodeExperiment):
    """Data, oracle, strategy and clients of ``scenario`` with ``seed``: a node's side
    (:class:`~fedram_flwr.clients.node.NodeExperiment`) and the server's."""

    def availability_law(self) -> np.ndarray:
        return availability_law(self.scenario, self.seed)

    def known_availability(self) -> np.ndarray | RoundLaw:
        return known_availability(self.scenario, self.seed)

    def client_manager(self) -> OracleClientManager:
        return build_oracle(self.scenario, self.seed)

    def evaluate_fn(self) -> EvaluateFn:
        """The server-side evaluation of a model (Flower's legacy ``evaluate_fn``)."""
        s, d = self.scenario, self.data
        return make_evaluate_fn(
            self.new_model(),
            d.test_x,
            d.test_y,
            num_classes=d.num_classes,
            rare_classes=d.rare_classes,
            every=s.eval_every,
            num_rounds=s.rounds,
            client_x=d.client_x if s.client_metrics else None,
            client_y=d.client_y if s.client_metrics else None,
            client_test=d.client_test if s.client_metrics else None,
            hcvar_alpha=s.hcvar_alpha,
        )

    def strategy(self) -> Strategy:
        s = self.scenario
        common = dict(
            fraction_fit=1.0,
            fraction_evaluate=0.0,
            min_fit_clients=1,
            min_evaluate_clients=0,
            min_available_clients=s.data.num_clients,
            on_fit_config_fn=lambda r: {SERVER_ROUND: r},
            fit_metrics_aggregation_fn=weighted_mean_metrics,
            evaluate_fn=self.evaluate_fn(),
            max_failed_rounds=s.max_failed_rounds,
        )
        theta = get_weights(self.new_model())
        return algorithm_spec(s).build_strategy(algorithm_params(s), self, theta, **common)

    def message_strategy(self) -> MessageStrategy:
        """The algorithm's Message-API strategy (same core and hyper-parameters as
        :meth:`strategy`), set up as the legacy one: every node it is shown trains
        (an availability wrapper shows the oracle's), no federated evaluation, the fit
        metrics' example-weighted means, the scenario's ``max_failed_rounds``. The model comes
        with ``start``."""
        s = self.scenario
        return algorithm_spec(s).build_message_strategy(
            algorithm_params(s),
            self,
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=1,
            min_evaluate_nodes=0,
            min_available_nodes=1,
            train_metrics_aggr_fn=weighted_mean_records,
            max_failed_rounds=s.max_failed_rounds,
        )
