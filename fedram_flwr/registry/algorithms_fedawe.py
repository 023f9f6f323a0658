"""The params of the FedAR family's schedule and of the algorithms the FedAWE paper
(Xiang et al., NeurIPS 2024, Table 2) compares beyond those of FedAR's: FedStale and
FedAvg over all clients (:data:`~fedram_flwr.registry.algorithms.ALGORITHMS` names
them), and :class:`ServerLRParams`, the schedule plus a global learning rate eta_g.
Kept apart from ``algorithms.py`` to keep each module short."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from flwr.common import NDArrays

from fedram_flwr.config import Scenario
from fedram_flwr.registry.specs import AlgorithmParams, Run
from fedram_flwr.schema import check_range


@dataclass(frozen=True)
class ScheduledParams(AlgorithmParams):
    """Shared by FedAR and its baselines: eta_t = training.lr * lr_decay^(t - 1) is the
    clients' step size in round t and FedAR's (MIFA's, FedVARP's) server step size.
    FedAR Sec. 6.1 gives only eta_0 = 0.1; lr_decay = 1 keeps it constant.
    ``availability``: where the baselines that weigh by p_i (FedAvg-IS, FedStale) take
    it from, ``estimated`` online (each its own estimator) or ``oracle`` (the true p_i:
    oracle-informed, as in FedAR's Sec. 6.1); shared so that one scenario can sweep
    ``algorithm.name``. No other algorithm of this family reads p_i."""

    lr_decay: float = 1.0
    availability: Literal["estimated", "oracle"] = "estimated"

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.lr_decay", self.lr_decay, 0.0, 1.0, lo_open=True)

    @property
    def oracle_informed(self) -> bool:
        return self.availability == "oracle"

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        """A VectorStrategy's: N = data.num_clients, eta_0 = training.lr."""
        return {
            "initial_arrays": initial,
            "num_clients": run.scenario.data.num_clients,
            "lr": run.scenario.training.lr,
            "lr_decay": self.lr_decay,
        }


def check_server_lr(value: float) -> None:
    """``algorithm.params.server_lr`` (eta_g) must be > 0."""
    check_range("algorithm.params.server_lr", value, 0.0, None, lo_open=True)


@dataclass(frozen=True)
class ServerLRParams(ScheduledParams):
    """The schedule and the global (server) learning rate eta_g, x_{t+1} = x_t + eta_g
    d_t with d_t the algorithm's aggregated update (MIFA, FedVARP, FedAvg-IS, FedAU,
    SCAFFOLD, FedAWE; the FedAU and FedAWE authors' code gives every baseline one). The
    default 1 leaves each algorithm as its paper states it, bit for bit."""

    server_lr: float = 1.0

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_server_lr(self.server_lr)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {**super().strategy_kwargs(run, initial), "server_lr": self.server_lr}


@dataclass(frozen=True)
class FedStaleActiveParams(ScheduledParams):
    """FedStale over the active set (``fedstale-active``): beta in [0, 1], the weight of
    the stale updates (0: FedAvg over the participating clients, 1: FedVARP), fresh
    updates weighted 1/|S|. The paper tunes beta to the data and participation
    heterogeneity; 0.5 is midway (the authors' run.sh)."""

    beta: float = 0.5

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.beta", self.beta, 0.0, 1.0)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {**super().strategy_kwargs(run, initial), "beta": self.beta}


@dataclass(frozen=True)
class FedStaleParams(FedStaleActiveParams):
    """FedStale (Rodio and Neglia 2024) as its authors' code runs it: fresh updates
    weighted 1/p_i (0: FedAvg-IS, 1: FedVARP with those weights); p_i the oracle's
    (``availability: oracle``, per round under a non-stationary law) or estimated with
    FedAU's interval estimator without cut-off (the authors' default)."""

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        known_p = run.known_availability() if self.oracle_informed else None
        return {**super().strategy_kwargs(run, initial), "known_p": known_p}


@dataclass(frozen=True)
class FedAWEParams(ServerLRParams):
    """FedAWE (Alg. 1): the global learning rate eta_g (App. J, Table 7: 1.0 on every
    data set); eta_l is ``training.lr`` (x ``lr_decay``^(t-1))."""
