"""Names a scenario may use, and the parameters each one accepts.

``availability.oracle`` and ``algorithm.name`` select an entry here; its ``params``
dataclass validates ``availability.params`` / ``algorithm.params`` at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fedram_flwr.config import ScenarioError, build_params, check_range
from fedram_flwr.rng import stream

if TYPE_CHECKING:
    from fedram_flwr.availability import OracleClientManager
    from fedram_flwr.config import Scenario


# ------------------------------------------------------------------- oracles
@dataclass(frozen=True)
class RAMParams:
    """Random Access Model: explicit ``rho``, or generated as in the paper (rho_i ~
    U(0,1) normalised; ``rare_rho`` pins the rare users' probabilities)."""

    clients_per_round: int = 1
    rho: tuple[float, ...] | None = None
    rare_rho: tuple[float, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        k = scenario.data.num_clients
        check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        if self.rho is not None and self.rare_rho is not None:
            raise ScenarioError("availability.params: give rho or rare_rho, not both")
        if self.rho is not None:
            rho = np.asarray(self.rho)
            if rho.size != k:
                raise ScenarioError(
                    f"availability.params.rho: has {rho.size} entries, data.num_clients is {k}"
                )
            if np.any(rho < 0) or abs(rho.sum() - 1.0) > 1e-6:
                raise ScenarioError(
                    "availability.params.rho: probabilities must be >= 0 and sum to 1 "
                    f"(they sum to {rho.sum():.6g})"
                )
        if self.rare_rho is not None:
            if len(self.rare_rho) != scenario.data.num_rare_clients:
                raise ScenarioError(
                    f"availability.params.rare_rho: has {len(self.rare_rho)} entries; the "
                    f"scenario has {scenario.data.num_rare_clients} rare clients "
                    "((1 - data.frequent_fraction) x data.num_clients)"
                )
            k_f = k - len(self.rare_rho)
            if min(self.rare_rho) <= 0 or sum(self.rare_rho) + k_f * max(self.rare_rho) >= 1:
                raise ScenarioError(
                    "availability.params.rare_rho: values must be > 0 and leave every one "
                    f"of the {k_f} frequent clients more likely than the rarest ones "
                    f"(sum + {k_f} x max < 1); got {list(self.rare_rho)}"
                )


def ram_rho(scenario: Scenario, seed: int) -> np.ndarray:
    from fedram_flwr.availability import ram_probabilities

    params: RAMParams = oracle_params(scenario)
    if params.rho is not None:
        return np.asarray(params.rho, dtype=float)
    rng = stream("ram-rho", seed)
    try:
        return ram_probabilities(
            scenario.data.num_clients, scenario.data.num_rare_clients, rng, params.rare_rho
        )
    except ValueError as err:
        raise ScenarioError(str(err)) from None


def build_ram(scenario: Scenario, seed: int):
    from fedram_flwr.availability import RandomAccessClientManager

    params: RAMParams = oracle_params(scenario)
    return RandomAccessClientManager(
        ram_rho(scenario, seed), seed, clients_per_round=params.clients_per_round
    )


def least_available(law: np.ndarray, k: int) -> tuple[int, ...]:
    """The ``k`` clients least likely to be relayed (ties: lower ids first)."""
    return tuple(sorted(int(i) for i in np.argsort(law, kind="stable")[:k]))


def ram_rare_clients(scenario: Scenario, seed: int) -> tuple[int, ...]:
    """The (100 - M)% least likely users hold the rare patterns."""
    return least_available(ram_rho(scenario, seed), scenario.data.num_rare_clients)


# ---------------------------------------- bernoulli, markov, clustered, cyclic, trace
# Each params class builds its manager (``manager(scenario, seed)``); ``check`` also runs
# the manager's constructor checks, so they fail at load time as ScenarioErrors.
def _as_scenario_error(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except ScenarioError:
        raise
    except ValueError as err:
        raise ScenarioError(str(err)) from None


def _check_length(field: str, values: tuple | None, n: int, what: str) -> None:
    if values is not None and len(values) != n:
        raise ScenarioError(f"{field}: has {len(values)} entries, {what} is {n}")


def _label_perm(scenario: Scenario, label_correlated: bool, pi: np.ndarray) -> np.ndarray:
    """Identity, or when ``label_correlated`` the re-assignment by label of
    :func:`~fedram_flwr.availability.label_permutation` on ``data.client_classes``."""
    from fedram_flwr.availability import label_permutation

    if not label_correlated:
        return np.arange(pi.size)
    if scenario.data.client_classes is None:
        raise ScenarioError(
            "availability.params.label_correlated: needs data.client_classes (the classes "
            "of each client) to rank clients by label; without it the rare-pattern split "
            "already gives the rare classes to the least available clients"
        )
    return label_permutation(pi, scenario.data.client_classes)


@dataclass(frozen=True)
class BernoulliParams:
    """Independent Bernoulli availability (FedAR Sec. 6.1): explicit ``p`` (one per
    client), or spread evenly from 1 (client 0) down to ``p_min`` (FedAR: 0.1
    "challenging", 0.5 "mild"). ``label_correlated``: clients holding lower class ids
    get the higher p (:func:`~fedram_flwr.availability.label_permutation`)."""

    p: tuple[float, ...] | None = None
    p_min: float = 0.1
    label_correlated: bool = False

    def check(self, scenario: Scenario) -> None:
        check_range("availability.params.p_min", self.p_min, 0.0, 1.0)
        k = scenario.data.num_clients
        _check_length("availability.params.p", self.p, k, "data.num_clients")
        _as_scenario_error(self.manager, scenario, 0)

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import BernoulliClientManager, fedar_spread

        k = scenario.data.num_clients
        p = fedar_spread(k, self.p_min) if self.p is None else np.asarray(self.p, dtype=float)
        return BernoulliClientManager(p[_label_perm(scenario, self.label_correlated, p)], seed)


@dataclass(frozen=True)
class MarkovParams:
    """Two-state Markov chain per client (CA-Fed Sec. III-D): explicit ``pi`` and
    ``lam`` (one each per client), or the paper's generator (Sec. V-A a): half the
    clients pi = 1/2 + g, half pi = 1/2 - g, each half split into lambda = nu and
    lambda ~ N(0, eps^2). ``label_correlated``: clients holding lower class ids get the
    higher pi (:func:`~fedram_flwr.availability.label_permutation`)."""

    pi: tuple[float, ...] | None = None
    lam: tuple[float, ...] | None = None
    g: float = 0.4
    nu: float = 0.9
    eps: float = 1e-2
    label_correlated: bool = False

    def check(self, scenario: Scenario) -> None:
        check_range("availability.params.g", self.g, 0.0, 0.5)
        check_range("availability.params.eps", self.eps, 0.0, None)
        lo = -(0.5 - self.g) / (0.5 + self.g)  # lambda_min of pi = 1/2 -+ g
        if not lo <= self.nu < 1:
            raise ScenarioError(
                f"availability.params.nu: {self.nu!r} is outside the allowed range "
                f"[{lo:.4g}, 1) for pi = 1/2 -+ g"
            )
        if (self.pi is None) != (self.lam is None):
            raise ScenarioError(
                "availability.params: give both pi and lam (one per client), or neither "
                "(the paper's generator with g, nu, eps)"
            )
        k = scenario.data.num_clients
        _check_length("availability.params.pi", self.pi, k, "data.num_clients")
        _check_length("availability.params.lam", self.lam, k, "data.num_clients")
        _as_scenario_error(self.manager, scenario, 0)

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import MarkovClientManager, ca_fed_markov_law

        if self.pi is None:
            rng = stream("markov-law", seed)
            pi, lam = ca_fed_markov_law(scenario.data.num_clients, self.g, self.nu, self.eps, rng)
        else:
            pi, lam = np.asarray(self.pi, dtype=float), np.asarray(self.lam, dtype=float)
        perm = _label_perm(scenario, self.label_correlated, pi)
        return MarkovClientManager(pi[perm], lam[perm], seed)


@dataclass(frozen=True)
class ClusteredParams:
    """One Markov chain per cluster switches all its clients together (CA-Fed Sec. V-B
    e). ``cluster_of``: each client's cluster (default: equal contiguous blocks of ids);
    explicit ``pi`` and ``lam`` per cluster, or the paper's: the first half of the
    clusters pi = 1/2 + g, lambda = 0, the others pi = 1/2 - g, lambda_c = c / C."""

    num_clusters: int = 10
    cluster_of: tuple[int, ...] | None = None
    pi: tuple[float, ...] | None = None
    lam: tuple[float, ...] | None = None
    g: float = 0.4

    def check(self, scenario: Scenario) -> None:
        k = scenario.data.num_clients
        check_range("availability.params.num_clusters", self.num_clusters, 1, k)
        check_range("availability.params.g", self.g, 0.0, 0.5)
        if (self.pi is None) != (self.lam is None):
            raise ScenarioError(
                "availability.params: give both pi and lam (one per cluster), or neither "
                "(the paper's clusters with g)"
            )
        c = self.num_clusters
        _check_length("availability.params.cluster_of", self.cluster_of, k, "data.num_clients")
        _check_length("availability.params.pi", self.pi, c, "availability.params.num_clusters")
        _check_length("availability.params.lam", self.lam, c, "availability.params.num_clusters")
        _as_scenario_error(self.manager, scenario, 0)

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import (
            MarkovClientManager,
            ca_fed_cluster_law,
            contiguous_clusters,
        )

        c = self.num_clusters
        pi, lam = ca_fed_cluster_law(c, self.g) if self.pi is None else (self.pi, self.lam)
        k = scenario.data.num_clients
        cluster_of = contiguous_clusters(k, c) if self.cluster_of is None else self.cluster_of
        return MarkovClientManager(pi, lam, seed, cluster_of=cluster_of)


@dataclass(frozen=True)
class CyclicParams:
    """Client k is active ``window`` consecutive rounds of every ``period``, from round
    phase_k + 1 on; ``phase`` (one per client) defaults to evenly spread starts."""

    period: int = 10
    window: int = 5
    phase: tuple[int, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        check_range("availability.params.period", self.period, 1, None)
        check_range("availability.params.window", self.window, 1, self.period)
        k = scenario.data.num_clients
        _check_length("availability.params.phase", self.phase, k, "data.num_clients")
        _as_scenario_error(self.manager, scenario, 0)

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import CyclicClientManager, evenly_spread_phases

        k = scenario.data.num_clients
        phase = evenly_spread_phases(k, self.period) if self.phase is None else self.phase
        return CyclicClientManager(phase, self.period, self.window, seed)


def resolve_app_path(path: str) -> Path:
    """An absolute path, or one relative to the working directory if it exists there,
    else to the app's root (where ``flwr run`` finds files shipped in the FAB)."""
    from fedram_flwr.app_config import APP_ROOT

    p = Path(path).expanduser()
    return p if p.is_absolute() or p.exists() else APP_ROOT / p


@dataclass(frozen=True)
class TraceParams:
    """Replay of a recorded trace (``path``): a round x client 0/1 CSV matrix (e.g. a
    run's ``availability.csv``) or JSON active ids per round. Past its last round:
    ``past_end: error`` (checked at load against ``rounds``) or ``wrap``."""

    path: str
    past_end: Literal["error", "wrap"] = "error"

    def check(self, scenario: Scenario) -> None:
        trace = _as_scenario_error(self.manager, scenario, 0)
        if self.past_end == "error" and scenario.rounds > trace.num_rounds:
            raise ScenarioError(
                f"availability.params.path: the trace has {trace.num_rounds} rounds but "
                f"rounds is {scenario.rounds}; run fewer rounds or set "
                "availability.params.past_end: wrap"
            )

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import TraceClientManager, read_trace

        matrix = read_trace(resolve_app_path(self.path), scenario.data.num_clients)
        return TraceClientManager(matrix, seed, wrap=self.past_end == "wrap")


@dataclass(frozen=True)
class ConnectedParams:
    """Physical availability (Deployment Engine): every connected client that has not
    failed, or ``clients_per_round`` of them drawn uniformly; round 1 waits for
    ``min_clients`` connections (default: all); a reply later than ``round_timeout`` s
    is a failure (null: no timeout); a failed client is left out for ``retry_after``
    rounds (null: until it reconnects)."""

    clients_per_round: int | None = None
    min_clients: int | None = None
    round_timeout: float | None = 30.0
    retry_after: int | None = None

    def check(self, scenario: Scenario) -> None:
        k = scenario.data.num_clients
        if self.clients_per_round is not None:
            check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        if self.min_clients is not None:
            check_range("availability.params.min_clients", self.min_clients, 1, k)
        if self.round_timeout is not None:
            check_range("availability.params.round_timeout", self.round_timeout, 0.1, None)
        if self.retry_after is not None:
            check_range("availability.params.retry_after", self.retry_after, 1, None)

    def manager(self, scenario: Scenario, seed: int) -> OracleClientManager:
        from fedram_flwr.availability import ConnectedClientManager

        return ConnectedClientManager(
            scenario.data.num_clients,
            seed,
            clients_per_round=self.clients_per_round,
            min_clients=self.min_clients,
            round_timeout=self.round_timeout,
            retry_after=self.retry_after,
        )


def build_oracle(scenario: Scenario, seed: int) -> OracleClientManager:
    return oracle_params(scenario).manager(scenario, seed)


def oracle_law(scenario: Scenario, seed: int) -> np.ndarray:
    """Each client's long-run probability of being active."""
    return build_oracle(scenario, seed).pi


def oracle_rare_clients(scenario: Scenario, seed: int) -> tuple[int, ...]:
    """The (100 - M)% least available clients hold the rare patterns."""
    return least_available(oracle_law(scenario, seed), scenario.data.num_rare_clients)


@dataclass(frozen=True)
class OracleSpec:
    params: type
    build: Any  # (scenario, seed) -> OracleClientManager
    rare_clients: Any  # (scenario, seed) -> tuple[int, ...]
    hidden_law: Any  # (scenario, seed) -> per-client relay probabilities, for plots


ORACLES: dict[str, OracleSpec] = {
    "ram": OracleSpec(RAMParams, build_ram, ram_rare_clients, ram_rho),
    **{
        name: OracleSpec(params, build_oracle, oracle_rare_clients, oracle_law)
        for name, params in (
            ("bernoulli", BernoulliParams),
            ("markov", MarkovParams),
            ("clustered", ClusteredParams),
            ("cyclic", CyclicParams),
            ("trace", TraceParams),
            ("connected", ConnectedParams),
        )
    },
}


# ---------------------------------------------------------------- algorithms
@dataclass(frozen=True)
class FedAvgParams:
    """FedAvg takes no parameters beyond ``training``."""

    def check(self, scenario: Scenario) -> None:
        pass


@dataclass(frozen=True)
class FedCVaRAvgParams:
    """Fed-CVaR-Avg (Alg. 1): CVaR level alpha, trade-off gamma, step size eta_t."""

    alpha: float = 0.1
    gamma: float = 0.1
    lr_t: float = 5e-4
    t_init: float = 0.0

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.alpha", self.alpha, 0.0, 1.0, lo_open=True)
        check_range("algorithm.params.gamma", self.gamma, 0.0, 1.0)
        check_range("algorithm.params.lr_t", self.lr_t, 0.0, None)


def build_fedavg(params: FedAvgParams, theta: list[np.ndarray], exp: Any, **common: Any):
    from fedram_flwr.strategies import FedAvg

    return FedAvg(initial_arrays=theta, **common)


def build_fed_cvar_avg(params: FedCVaRAvgParams, theta: list[np.ndarray], exp: Any, **common: Any):
    from fedram_flwr.strategies import FedCVaRAvg

    return FedCVaRAvg(
        initial_arrays=theta,
        alpha=params.alpha,
        gamma=params.gamma,
        lr_t=params.lr_t,
        t_init=params.t_init,
        **common,
    )


@dataclass(frozen=True)
class AlgorithmSpec:
    params: type
    client: str  # class name in fedram_flwr.clients
    # (params, initial theta, the Experiment, **FedAvg kwargs) -> Strategy; the
    # Experiment gives data sizes and, in oracle-informed mode only, the hidden law.
    build: Any


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "fedavg": AlgorithmSpec(FedAvgParams, "ERMClient", build_fedavg),
    "fed-cvar-avg": AlgorithmSpec(FedCVaRAvgParams, "CVaRClient", build_fed_cvar_avg),
}


# ------------------------------------------------- CA-Fed and its baselines (issue 3)
@dataclass(frozen=True)
class AvailabilityAwareParams:
    """Shared by CA-Fed and its baselines (CA-Fed Sec. V-A c): the server learning rate
    eta_bar of eq. 3, and where each client's pi comes from: ``estimated`` (Sec. IV-B,
    Beta(1, 1) priors) or ``oracle`` (the oracle's true values: oracle-informed, as in
    the paper's main experiments). The target importance alpha is proportional to the
    clients' training-set sizes (Sec. II)."""

    server_lr: float = 1.0
    availability: Literal["estimated", "oracle"] = "estimated"

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.server_lr", self.server_lr, 0.0, None, lo_open=True)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        sizes = np.array([len(y) for y in exp.data.client_y], dtype=float)
        kwargs: dict[str, Any] = {"alpha": sizes / sizes.sum(), "server_lr": self.server_lr}
        if self.availability == "oracle":
            kwargs["known_pi"] = exp.hidden_law()
        return kwargs


# Oracles whose clients follow two-state Markov chains with a known lambda_k.
MARKOV_ORACLES = ("markov", "clustered", "bernoulli")


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
        if self.availability == "oracle" and scenario.availability.oracle not in MARKOV_ORACLES:
            raise ScenarioError(
                "algorithm.params.availability: oracle-informed CA-Fed needs each client's "
                f"lambda_k, which only the {', '.join(MARKOV_ORACLES)} oracles define; "
                f"availability.oracle is {scenario.availability.oracle!r} (use estimated)"
            )

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(exp)
        kwargs.update(kappa2=self.kappa2, beta=self.beta, tau=self.tau, loss_floor=self.loss_floor)
        if self.availability == "oracle":
            kwargs["known_lam"] = exp.client_manager().lam
        return kwargs


@dataclass(frozen=True)
class MoreAvailableParams(AvailabilityAwareParams):
    """More available: only the clients with pi_k >= min_pi (1/2 splits the paper's
    population, pi = 1/2 +- g)."""

    min_pi: float = 0.5

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.min_pi", self.min_pi, 0.0, 1.0)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        return {**super().strategy_kwargs(exp), "min_pi": self.min_pi}


@dataclass(frozen=True)
class F3ASTParams(AvailabilityAwareParams):
    """F3AST: at most ``clients_per_round`` participants per round (default: half the
    clients, the authors' 12 of 24 in CA-Fed's code)."""

    clients_per_round: int | None = None

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        if self.clients_per_round is not None:
            k = scenario.data.num_clients
            check_range("algorithm.params.clients_per_round", self.clients_per_round, 1, k)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        m = self.clients_per_round or max(1, exp.scenario.data.num_clients // 2)
        return {**super().strategy_kwargs(exp), "clients_per_round": m}


def availability_aware_builder(strategy: str) -> Any:
    """The ``build`` of an :class:`AvailabilityAwareParams` algorithm: the strategy
    class ``strategy`` of ``fedram_flwr.strategies`` with the params' keyword args."""

    def build(params: AvailabilityAwareParams, theta: list[np.ndarray], exp: Any, **common: Any):
        from fedram_flwr import strategies

        cls = getattr(strategies, strategy)
        return cls(initial_arrays=theta, **params.strategy_kwargs(exp), **common)

    return build


ALGORITHMS.update(
    {
        "ca-fed": AlgorithmSpec(CAFedParams, "CAFedClient", availability_aware_builder("CAFed")),
        **{
            name: AlgorithmSpec(params, "ERMClient", availability_aware_builder(strategy))
            for name, params, strategy in (
                ("unbiased", AvailabilityAwareParams, "Unbiased"),
                ("more-available", MoreAvailableParams, "MoreAvailable"),
                ("adafed", AvailabilityAwareParams, "AdaFed"),
                ("f3ast", F3ASTParams, "F3AST"),
            )
        },
    }
)


# ------------------------------------- FedAR and the stale-update baselines (issue 4)
@dataclass(frozen=True)
class ScheduledParams:
    """Shared by FedAR and its baselines: eta_t = training.lr * lr_decay^(t - 1) is the
    clients' step size in round t and FedAR's (MIFA's, FedVARP's) server step size.
    FedAR Sec. 6.1 gives only eta_0 = 0.1; lr_decay = 1 keeps it constant.
    ``availability``: where the one baseline that weighs by p_i (FedAvg-IS) takes it
    from, ``estimated`` online (CA-Fed's pi_hat) or ``oracle`` (the true p_i:
    oracle-informed, as in FedAR's Sec. 6.1); shared so that one scenario can sweep
    ``algorithm.name``. No other algorithm of this family reads p_i."""

    lr_decay: float = 1.0
    availability: Literal["estimated", "oracle"] = "estimated"

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.lr_decay", self.lr_decay, 0.0, 1.0, lo_open=True)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        return {"lr_decay": self.lr_decay}


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

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        from functools import partial

        from fedram_flwr.strategies.fedar import g_convex, g_nonconvex

        if self.g == "convex":
            g = partial(g_convex, t0=self.t0, b=self.b)
        else:
            g = partial(g_nonconvex, t0=self.t0, scale=self.scale)
        return {**super().strategy_kwargs(exp), "rho": self.rho, "g": g}


@dataclass(frozen=True)
class FedAvgISParams(ScheduledParams):
    """FedAvg-IS weighs each available client by 1 / p_i: the oracle's hidden p_i only
    with ``availability: oracle`` (the opt-in), else CA-Fed's estimate."""

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(exp)
        return {**kwargs, "known_p": exp.hidden_law() if self.availability == "oracle" else None}


@dataclass(frozen=True)
class FedAvgSampledParams(ScheduledParams):
    """FedAvg(S): at most ``max_clients`` (S) of the available clients a round, drawn
    from (seed, round) (FedAR Sec. 6.1: S = 50)."""

    max_clients: int = 50

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.max_clients", self.max_clients, 1, None)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        kwargs = super().strategy_kwargs(exp)
        return {**kwargs, "max_clients": self.max_clients, "seed": exp.seed}


@dataclass(frozen=True)
class FedAUParams(ScheduledParams):
    """FedAU: the cut-off K of the participation intervals (Wang & Ji's code: 50)."""

    cutoff: int = 50

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.cutoff", self.cutoff, 1, None)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        return {**super().strategy_kwargs(exp), "cutoff": self.cutoff}


@dataclass(frozen=True)
class ScaffoldParams(ScheduledParams):
    """SCAFFOLD: the global step size eta_g (Karimireddy et al., Alg. 1)."""

    server_lr: float = 1.0

    def check(self, scenario: Scenario) -> None:
        super().check(scenario)
        check_range("algorithm.params.server_lr", self.server_lr, 0.0, None, lo_open=True)

    def strategy_kwargs(self, exp: Any) -> dict[str, Any]:
        return {**super().strategy_kwargs(exp), "server_lr": self.server_lr}


def vector_builder(strategy: str) -> Any:
    """The ``build`` of a :class:`ScheduledParams` algorithm: the VectorStrategy class
    ``strategy`` of ``fedram_flwr.strategies`` for N = data.num_clients, eta_0 =
    training.lr and the params' keyword args."""

    def build(params: ScheduledParams, theta: list[np.ndarray], exp: Any, **common: Any):
        from fedram_flwr import strategies

        return getattr(strategies, strategy)(
            initial_arrays=theta,
            num_clients=exp.scenario.data.num_clients,
            lr=exp.scenario.training.lr,
            **params.strategy_kwargs(exp),
            **common,
        )

    return build


ALGORITHMS.update(
    {
        name: AlgorithmSpec(params, client, vector_builder(strategy))
        for name, params, client, strategy in (
            ("fedar", FedARParams, "ERMClient", "FedAR"),
            ("mifa", ScheduledParams, "ERMClient", "MIFA"),
            ("fedvarp", ScheduledParams, "ERMClient", "FedVARP"),
            ("fedavg-is", FedAvgISParams, "ERMClient", "FedAvgIS"),
            ("fedavg-s", FedAvgSampledParams, "ERMClient", "FedAvgSampled"),
            ("fedau", FedAUParams, "ERMClient", "FedAU"),
            ("scaffold", ScaffoldParams, "ScaffoldClient", "Scaffold"),
        )
    }
)


# ------------------------------------------------------------------ lookups
def _lookup(table: dict[str, Any], name: str, field: str) -> Any:
    if name not in table:
        raise ScenarioError(
            f"{field}: unknown name {name!r}; allowed values: {', '.join(sorted(table))}"
        )
    return table[name]


def oracle_params(scenario: Scenario) -> Any:
    spec = _lookup(ORACLES, scenario.availability.oracle, "availability.oracle")
    params = build_params(spec.params, scenario.availability.params, "availability.params.")
    params.check(scenario)
    return params


def algorithm_params(scenario: Scenario) -> Any:
    spec = _lookup(ALGORITHMS, scenario.algorithm.name, "algorithm.name")
    params = build_params(spec.params, scenario.algorithm.params, "algorithm.params.")
    params.check(scenario)
    return params


def oracle_spec(scenario: Scenario) -> OracleSpec:
    return _lookup(ORACLES, scenario.availability.oracle, "availability.oracle")


def algorithm_spec(scenario: Scenario) -> AlgorithmSpec:
    return _lookup(ALGORITHMS, scenario.algorithm.name, "algorithm.name")


# ------------------------------------------- RC-FL (rFedFair), AFL and q-FFL (issue 5)
@dataclass(frozen=True)
class RFedFairParams:
    """rFedFair (RC-FL Alg. 1): alpha_i (one value for every client or one per client,
    each in [p_i, 1], p_i = m_i / m; checked against the data when the run starts), the
    smoothing mu of phi_mu (Sec. 4), eta's step size (default: training.lr, Alg. 1's
    beta for both) and start, and ``clients_per_round`` K for partial participation (K
    draws with replacement by p_i; default: full participation)."""

    alpha: tuple[float, ...] = (0.5,)
    mu: float = 0.01
    lr_eta: float | None = None
    eta_init: float = 0.0
    clients_per_round: int | None = None

    def check(self, scenario: Scenario) -> None:
        n = scenario.data.num_clients
        if len(self.alpha) not in (1, n):
            raise ScenarioError(
                f"algorithm.params.alpha: give one value or one per client ({n}), "
                f"got {len(self.alpha)}"
            )
        for i, a in enumerate(self.alpha):
            check_range(f"algorithm.params.alpha[{i}]", a, 0.0, 1.0, lo_open=True)
        check_range("algorithm.params.mu", self.mu, 0.0, None, lo_open=True)
        if self.lr_eta is not None:
            check_range("algorithm.params.lr_eta", self.lr_eta, 0.0, None)
        if self.clients_per_round is not None:
            check_range("algorithm.params.clients_per_round", self.clients_per_round, 1, None)


def build_rfedfair(params: RFedFairParams, theta: list[np.ndarray], exp: Any, **common: Any):
    from fedram_flwr.strategies import RFedFair
    from fedram_flwr.strategies.rc_fl import check_alpha, per_client

    sizes = np.array([len(y) for y in exp.data.client_y], dtype=float)
    alpha = per_client(params.alpha, sizes.size, "algorithm.params.alpha")
    try:  # fail before training, naming the field
        check_alpha(alpha, sizes / sizes.sum(), "algorithm.params.alpha")
    except ValueError as err:
        raise ScenarioError(str(err)) from None
    lr = exp.scenario.training.lr
    return RFedFair(
        initial_arrays=theta,
        alpha=params.alpha,
        mu=params.mu,
        lr_eta=lr if params.lr_eta is None else params.lr_eta,
        eta_init=params.eta_init,
        clients_per_round=params.clients_per_round,
        seed=exp.seed,
        **common,
    )


@dataclass(frozen=True)
class AFLParams:
    """AFL (Mohri et al. 2019): gamma_lambda, the ascent step on the mixture weights."""

    lr_lambda: float = 0.01

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.lr_lambda", self.lr_lambda, 0.0, None)


def build_afl(params: AFLParams, theta: list[np.ndarray], exp: Any, **common: Any):
    from fedram_flwr.strategies import AFL

    return AFL(
        initial_arrays=theta,
        num_clients=exp.scenario.data.num_clients,
        lr_lambda=params.lr_lambda,
        **common,
    )


@dataclass(frozen=True)
class QFFLParams:
    """q-FFL (Li et al. 2020) through Flower's QFedAvg: q (q = 0 is FedAvg's objective);
    QFedAvg's learning rate is the clients' ``training.lr`` (L = 1 / lr)."""

    q: float = 1.0

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.q", self.q, 0.0, None)


def build_qffl(params: QFFLParams, theta: list[np.ndarray], exp: Any, **common: Any):
    from fedram_flwr.strategies import QFFL

    return QFFL(
        q_param=params.q,
        qffl_learning_rate=exp.scenario.training.lr,
        initial_arrays=theta,
        **common,
    )


ALGORITHMS.update(
    {
        "rfedfair": AlgorithmSpec(RFedFairParams, "RCFLClient", build_rfedfair),
        "afl": AlgorithmSpec(AFLParams, "CAFedClient", build_afl),
        "qffl": AlgorithmSpec(QFFLParams, "CAFedClient", build_qffl),
    }
)
