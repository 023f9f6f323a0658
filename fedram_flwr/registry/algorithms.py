"""The algorithms a scenario may name in ``algorithm.name``.

Each algorithm is declared once, as an :class:`AlgorithmSpec`: its name, the dataclass of
its ``algorithm.params``, its Flower strategy classes (legacy, then Message API: the same
core), its client class and which hidden
oracle parameters it reads when run oracle-informed. Every params dataclass has the
same two methods: ``check(scenario)`` raises errors naming the scenario field and the
allowed values, ``strategy_kwargs(run, initial)`` gives the strategy's own keyword
arguments (the strategy receives them with the FedAvg ones every algorithm shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from flwr.common import NDArrays

from fedram_flwr import strategies as st
from fedram_flwr.extras import is_missing_extra, placeholder

try:
    from fedram_flwr.clients import (
        AmplifiedScaffoldClient,
        CAFedClient,
        CVaRClient,
        ERMClient,
        RCFLClient,
        ScaffoldClient,
    )
except ModuleNotFoundError as err:  # no torch: scenarios still load (`fedram show`)
    if not is_missing_extra(err):
        raise
    names = (
        "AmplifiedScaffoldClient",
        "CAFedClient",
        "CVaRClient",
        "ERMClient",
        "RCFLClient",
        "ScaffoldClient",
    )
    AmplifiedScaffoldClient, CAFedClient, CVaRClient, ERMClient, RCFLClient, ScaffoldClient = (
        placeholder(name, err) for name in names
    )
from fedram_flwr.config import Scenario
from fedram_flwr.message_api import algorithms as ma
from fedram_flwr.registry.algorithms_fedawe import (
    FedAWEParams,
    FedStaleActiveParams,
    FedStaleParams,
    ScheduledParams,
    ServerLRParams,
    check_server_lr,
)
from fedram_flwr.registry.algorithms_rc_fl import AFLParams, QFFLParams, RFedFairParams
from fedram_flwr.registry.oracles import MARKOV
from fedram_flwr.registry.specs import AlgorithmParams, AlgorithmSpec, Hidden, Run, client_shares
from fedram_flwr.schema import check_range
from fedram_flwr.strategies.fedar import g_convex, g_nonconvex


# -------------------------------------------------------- FedAvg, Fed-CVaR-Avg
@dataclass(frozen=True)
class FedAvgParams(AlgorithmParams):
    """FedAvg: the global learning rate eta_g on the averaged update (> 0; 1, the
    default: the mean itself, McMahan et al.; the FedAU and FedAWE authors' code has it)."""

    server_lr: float = 1.0

    def check(self, scenario: Scenario) -> None:
        check_server_lr(self.server_lr)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {"initial_arrays": initial, "server_lr": self.server_lr}


@dataclass(frozen=True)
class FedCVaRAvgParams(AlgorithmParams):
    """Fed-CVaR-Avg (Alg. 1): CVaR level alpha, trade-off gamma, step size eta_t."""

    alpha: float = 0.1
    gamma: float = 0.1
    lr_t: float = 5e-4
    t_init: float = 0.0

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.alpha", self.alpha, 0.0, 1.0, lo_open=True)
        check_range("algorithm.params.gamma", self.gamma, 0.0, 1.0)
        check_range("algorithm.params.lr_t", self.lr_t, 0.0, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {
            "initial_arrays": initial,
            "alpha": self.alpha,
            "gamma": self.gamma,
            "lr_t": self.lr_t,
            "t_init": self.t_init,
        }


# ---------------------------------------------------- CA-Fed and its baselines
@dataclass(frozen=True)
class AvailabilityAwareParams(AlgorithmParams):
    """Shared by CA-Fed and its baselines (CA-Fed Sec. V-A c): the server learning rate
    eta_bar of eq. 3, and where each client's pi comes from: ``estimated`` (Sec. IV-B,
    Beta(1, 1) priors) or ``oracle`` (the oracle's true values: oracle-informed, as in
    the paper's main experiments). The target importance alpha is proportional to the
    clients' training-set sizes (Sec. II)."""

    server_lr: float = 1.0
    availability: Literal["estimated", "oracle"] = "estimated"

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.server_lr", self.server_lr, 0.0, None, lo_open=True)

    @property
    def oracle_informed(self) -> bool:
        return self.availability == "oracle"

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "initial_arrays": initial,
            "alpha": client_shares(run),
            "server_lr": self.server_lr,
        }
        if self.oracle_informed:
            kwargs["known_pi"] = run.availability_law()
        return kwargs


@dataclass(frozen=True)
class CAFedParams(AvailabilityAwareParams):
    """CA-Fed (Alg. 1): kappa_bar^2 (Sec. IV-C), beta (eq. 17), tau (line 19), how F_k*
    is estimated (``loss_floor``, see strategies/ca_fed.py); in oracle-informed mode it
    also receives each client's true lambda_k."""

    kappa2: float = 1.0
    beta: float = 1.0
    tau: float = 0.0
    loss_floor: Literal["running-min", "local-optimum"] = "running-min"

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.kappa2", self.kappa2, 0.0, None)
        check_range("algorithm.params.beta", self.beta, 0.0, 1.0, lo_open=True)
        check_range("algorithm.params.tau", self.tau, 0.0, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(run, initial)
        kwargs.update(kappa2=self.kappa2, beta=self.beta, tau=self.tau, loss_floor=self.loss_floor)
        if self.oracle_informed:
            kwargs["known_lam"] = run.client_manager().lam
        return kwargs


@dataclass(frozen=True)
class MoreAvailableParams(AvailabilityAwareParams):
    """More available: only the clients with pi_k >= min_pi (1/2 splits the paper's
    population, pi = 1/2 +- g)."""

    min_pi: float = 0.5

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.min_pi", self.min_pi, 0.0, 1.0)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {**super().strategy_kwargs(run, initial), "min_pi": self.min_pi}


@dataclass(frozen=True)
class F3ASTParams(AvailabilityAwareParams):
    """F3AST: at most ``clients_per_round`` participants a round (default: half the
    clients, as CA-Fed's code); ``rate``: ``smoothed`` (its own estimate, smoothing
    ``beta``, 0.01 as its authors' code; reads nothing hidden) or ``ca-fed`` (r = pi as
    ``availability`` says: the rule before issue 27; ``beta`` unused)."""

    clients_per_round: int | None = None
    beta: float = 0.01
    rate: Literal["smoothed", "ca-fed"] = "smoothed"

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        if self.clients_per_round is not None:
            k = scenario.data.num_clients
            check_range("algorithm.params.clients_per_round", self.clients_per_round, 1, k)
        check_range("algorithm.params.beta", self.beta, 0.0, 1.0, lo_open=True)

    @property
    def oracle_informed(self) -> bool:
        return self.rate == "ca-fed" and super().oracle_informed

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        m = self.clients_per_round or max(1, run.scenario.data.num_clients // 2)
        kwargs = super().strategy_kwargs(run, initial)
        return {**kwargs, "clients_per_round": m, "beta": self.beta, "rate": self.rate}


# ---------------------------------------- FedAR and the stale-update baselines
@dataclass(frozen=True)
class FedARParams(ScheduledParams):
    """FedAR (eq. 6): rho, and the cut-off g(t) of Sec. 5, ``convex`` t0 + t / b (t0 > 0,
    b > 2) or ``nonconvex`` scale * max(sqrt(t), sqrt(t0)). The paper gives no values
    for t0, b and scale; these defaults drop updates that are 10 + t/4 rounds old."""

    rho: float = 0.1
    g: Literal["convex", "nonconvex"] = "convex"
    t0: float = 10.0
    b: float = 4.0
    scale: float = 4.0

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.rho", self.rho, 0.0, 1.0)
        check_range("algorithm.params.t0", self.t0, 0.0, None, lo_open=True)
        check_range("algorithm.params.b", self.b, 2.0, None, lo_open=True)
        check_range("algorithm.params.scale", self.scale, 0.0, None, lo_open=True)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        if self.g == "convex":
            g = partial(g_convex, t0=self.t0, b=self.b)
        else:
            g = partial(g_nonconvex, t0=self.t0, scale=self.scale)
        return {**super().strategy_kwargs(run, initial), "rho": self.rho, "g": g}


@dataclass(frozen=True)
class FedAvgISParams(ServerLRParams):
    """FedAvg-IS weighs each available client by 1 / p_i: the oracle's hidden p_i only
    with ``availability: oracle`` (the opt-in; under a law that changes with the round,
    the current round's p_i^t: FedAvg with known p_i^t, FedAWE Table 2), else CA-Fed's
    estimate; eta_g ``server_lr``."""

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        known_p = run.known_availability() if self.oracle_informed else None
        return {**super().strategy_kwargs(run, initial), "known_p": known_p}


@dataclass(frozen=True)
class FedAvgSampledParams(ScheduledParams):
    """FedAvg(S): at most ``max_clients`` (S) of the available clients a round, drawn
    from (seed, round) (FedAR Sec. 6.1: S = 50)."""

    max_clients: int = 50

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.max_clients", self.max_clients, 1, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(run, initial)
        return {**kwargs, "max_clients": self.max_clients, "seed": run.seed}


@dataclass(frozen=True)
class FedAUParams(ServerLRParams):
    """FedAU: the cut-off K of the participation intervals. Default 50, the second
    variant of Wang & Ji's code; their code's default is no cut-off, which a K at least
    the number of rounds gives (an interval is never cut before it ends); eta_g
    ``server_lr``."""

    cutoff: int = 50

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.cutoff", self.cutoff, 1, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {**super().strategy_kwargs(run, initial), "cutoff": self.cutoff}


@dataclass(frozen=True)
class ScaffoldParams(ServerLRParams):
    """SCAFFOLD: the global step size eta_g (Karimireddy et al., Alg. 1)."""


@dataclass(frozen=True)
class AmplifiedScaffoldParams(ScheduledParams):
    """Amplified SCAFFOLD (Crawshaw and Liu, NeurIPS 2024): the period P in rounds and the
    amplification gamma; defaults are the authors' FashionMNIST run (P = 20, gamma = 1.5).
    The local step size is training.lr."""

    period: int = 20  # >= 1
    amplification: float = 1.5  # > 0

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.period", self.period, 1, None)
        check_range("algorithm.params.amplification", self.amplification, 0.0, None, lo_open=True)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(run, initial)
        return {**kwargs, "period": self.period, "amplification": self.amplification}


# ------------------------------------------------ RC-FL (rFedFair), AFL, q-FFL
# ------------------------------------------------------------------ the table
PI: frozenset[Hidden] = frozenset({"pi"})

ALGORITHMS: dict[str, AlgorithmSpec[Any]] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec("fedavg", FedAvgParams, st.FedAvg, ma.FedAvg, ERMClient),
        AlgorithmSpec("fed-cvar-avg", FedCVaRAvgParams, st.FedCVaRAvg, ma.FedCVaRAvg, CVaRClient),
        # CA-Fed (Rodio et al. 2023) and its baselines
        AlgorithmSpec("ca-fed", CAFedParams, st.CAFed, ma.CAFed, CAFedClient, reads_hidden=MARKOV),
        AlgorithmSpec(
            "unbiased",
            AvailabilityAwareParams,
            st.Unbiased,
            ma.Unbiased,
            ERMClient,
            reads_hidden=PI,
        ),
        AlgorithmSpec(
            "more-available",
            MoreAvailableParams,
            st.MoreAvailable,
            ma.MoreAvailable,
            ERMClient,
            reads_hidden=PI,
        ),
        AlgorithmSpec(
            "adafed", AvailabilityAwareParams, st.AdaFed, ma.AdaFed, ERMClient, reads_hidden=PI
        ),
        AlgorithmSpec("f3ast", F3ASTParams, st.F3AST, ma.F3AST, ERMClient, reads_hidden=PI),
        # FedAR (Jiang et al. 2024) and its baselines
        AlgorithmSpec("fedar", FedARParams, st.FedAR, ma.FedAR, ERMClient),
        AlgorithmSpec("mifa", ServerLRParams, st.MIFA, ma.MIFA, ERMClient),
        AlgorithmSpec("fedvarp", ServerLRParams, st.FedVARP, ma.FedVARP, ERMClient),
        AlgorithmSpec(
            "fedstale", FedStaleParams, st.FedStale, ma.FedStale, ERMClient, reads_hidden=PI
        ),
        AlgorithmSpec(
            "fedstale-active", FedStaleActiveParams, st.FedStaleActive, ma.FedStaleActive, ERMClient
        ),
        AlgorithmSpec("fedavg-all", ScheduledParams, st.FedAvgAll, ma.FedAvgAll, ERMClient),
        AlgorithmSpec("fedawe", FedAWEParams, st.FedAWE, ma.FedAWE, ERMClient),
        AlgorithmSpec(
            "fedavg-is", FedAvgISParams, st.FedAvgIS, ma.FedAvgIS, ERMClient, reads_hidden=PI
        ),
        AlgorithmSpec(
            "fedavg-s", FedAvgSampledParams, st.FedAvgSampled, ma.FedAvgSampled, ERMClient
        ),
        AlgorithmSpec("fedau", FedAUParams, st.FedAU, ma.FedAU, ERMClient),
        AlgorithmSpec("scaffold", ScaffoldParams, st.Scaffold, ma.Scaffold, ScaffoldClient),
        # Debiasing FedAvg (Sun et al. 2025), Amplified SCAFFOLD (Crawshaw and Liu 2024)
        AlgorithmSpec(
            "debiasing-fedavg",
            FedAvgISParams,
            st.DebiasingFedAvg,
            ma.DebiasingFedAvg,
            ERMClient,
            reads_hidden=PI,
        ),
        AlgorithmSpec(
            "amplified-scaffold",
            AmplifiedScaffoldParams,
            st.AmplifiedScaffold,
            ma.AmplifiedScaffold,
            AmplifiedScaffoldClient,
        ),
        # RC-FL (rFedFair) and its baselines
        AlgorithmSpec("rfedfair", RFedFairParams, st.RFedFair, ma.RFedFair, RCFLClient),
        AlgorithmSpec("afl", AFLParams, st.AFL, ma.AFL, CAFedClient),
        AlgorithmSpec("qffl", QFFLParams, st.QFFL, ma.QFFL, CAFedClient),
    )
}
