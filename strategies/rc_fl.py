"""RC-FL (Robust Client-weighted Federated Learning) and its algorithm rFedFair.

"Fairness-aware Federated Learning: A Robust Approach" (anonymous ICML submission;
``papers/rc-fl_fairness-aware-robust.md``), Sections 3-4, Algorithm 1, Lemmas 1-2.

RC-FL minimises the Q_alpha-weighted loss (eq. 1/3): with p_i = m_i / m and a per-client
alpha_i in [p_i, 1],

    f_alpha(omega) = sup_{q in Q_alpha} sum_i q_i p_i f_i(omega),
    Q_alpha = {q : sum_i q_i p_i = 1, 0 <= q_i <= 1 / alpha_i},

which is the heterogeneous CVaR (HCVaR, Def. 2) of the client losses. Lemma 1 gives the
dual f_alpha = inf_eta {eta + sum_i (p_i / alpha_i) (f_i - eta)_+} (eq. 2), so RC-FL is a
joint minimisation over (omega, eta) (eq. 4), smoothed with
phi_mu(x) = mu log(1 + e^{x / mu}) into (eq. 5)

    F^mu(omega, eta) = sum_i p_i f^{mu,i}(omega, eta),
    f^{mu,i}(omega, eta) = (1 / alpha_i) phi_mu(f_i(omega) - eta) + eta,

with F <= F^mu <= F + mu tau_alpha, tau_alpha = sum_i p_i / alpha_i (Lemma 2).
alpha_i = 1 for all i is the FedAvg objective sum_i p_i f_i; alpha_i = p_i is AFL's
max_i f_i (Sec. 3.1).

rFedFair (Alg. 1): each selected client takes kappa gradient steps on f^{mu,i} in
(omega, eta) from the broadcast (omega, eta); the server averages what it receives,
p_i-weighted under full participation, uniformly over K draws with replacement by p_i
under partial participation (Sec. 4); the output is the last iterate and the running
average omega_tilde_T.

Flower's Message API: ``RFedFair`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from flwr.common import (
    FitIns,
    NDArrays,
    Parameters,
    Scalar,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.objectives import (
    check_alpha,
    hcvar,
    rcfl_gradient_weights,
    rcfl_local_objective,
    sigmoid,
    softplus_mu,
)
from fedram_flwr.protocol import (
    LR_ETA,
    RCFL_ALPHA,
    RCFL_MU,
    RCFL_P,
    THRESHOLD_ETA,
    Arrays,
    ClientReply,
    join_theta_t,
    split_theta_t,
)
from fedram_flwr.rng import stream
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.fedavg import weighted_average

N = TypeVar("N", bound=Hashable)  # a node's name (a proxy's cid, a Message-API node id)

__all__ = [
    "RFedFair",
    "RFedFairCore",
    "check_alpha",
    "hcvar",
    "rcfl_gradient_weights",
    "rcfl_local_objective",
    "sigmoid",
    "softplus_mu",
]


# ------------------------------------------------------------------ pure functions
def rcfl_dual(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """F_alpha(omega, eta) = eta + sum_i (p_i / alpha_i) (f_i - eta)_+ (eq. 2/4), for
    one eta or an array of them."""
    eta = np.asarray(eta, dtype=float)
    return eta + np.maximum(-np.subtract.outer(eta, losses), 0.0) @ (p / alpha)


def rcfl_smoothed(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray, mu: float):
    """F^mu_alpha(omega, eta) = sum_i p_i f^{mu,i} (eq. 5), for one eta or an array."""
    eta = np.asarray(eta, dtype=float)
    return eta + softplus_mu(-np.subtract.outer(eta, losses), mu) @ (p / alpha)


def per_client(value: float | Sequence[float], num_clients: int, field: str) -> np.ndarray:
    """A scalar (every client) or one value per client, as a float array."""
    v = np.atleast_1d(np.asarray(value, dtype=float))
    if v.size == 1:
        return np.full(num_clients, v[0])
    if v.size != num_clients:
        raise ValueError(f"{field}: give one value or one per client ({num_clients}), got {v.size}")
    return v


def draw_with_replacement(p: np.ndarray, k: int, seed: int, server_round: int) -> dict[int, int]:
    """Partial participation (Sec. 4, after Li et al. 2020b): K draws with replacement
    by p (normalised), from a generator seeded by (seed, round). Returns position ->
    multiplicity."""
    rng = stream("rcfl-draws", seed, server_round)
    drawn = rng.choice(len(p), size=k, replace=True, p=p / p.sum())
    values, counts = np.unique(drawn, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}


# ------------------------------------------------------------------------ core
@dataclass(frozen=True, eq=False)
class RFedFairState:
    """The global (omega, eta) as broadcast, the running sum of the broadcast omegas
    and their count (omega_tilde_T), and the round's draw: partition id -> times drawn."""

    arrays: Arrays
    omega_sum: list[np.ndarray] | None = None
    averaged_rounds: int = 0
    multiplicity: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, eq=False, kw_only=True)
class RFedFairCore(Core[RFedFairState]):
    """rFedFair's server (Alg. 1): alpha (one value or one per client), mu, beta_eta
    (``lr_eta``), eta's start, K (``clients_per_round``; ``None``: full participation)
    and the seed of the draws."""

    alpha: np.ndarray
    mu: float = 0.01
    lr_eta: float = 0.01
    eta_init: float = 0.0
    clients_per_round: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        a = np.atleast_1d(np.asarray(self.alpha, dtype=float))
        if np.any(a <= 0) or np.any(a > 1):
            raise ValueError(f"algorithm.params.alpha: {a.tolist()} must lie in (0, 1]")
        if self.mu <= 0 or self.lr_eta < 0:
            raise ValueError(
                f"algorithm.params: mu ({self.mu}) must be > 0, lr_eta ({self.lr_eta}) >= 0"
            )
        k = self.clients_per_round
        if k is not None and k < 1:
            raise ValueError(f"algorithm.params.clients_per_round: {k} < 1")
        object.__setattr__(self, "alpha", a)

    def client_count(self) -> int | None:
        return self.alpha.size if self.alpha.size > 1 else None  # one alpha_i per client

    def init(self, initial_arrays: Sequence[np.ndarray]) -> RFedFairState:
        return RFedFairState(join_theta_t(initial_arrays, self.eta_init))

    def arrays(self, state: RFedFairState) -> Arrays:
        return state.arrays

    def alpha_of(self, pid: int) -> float:
        """alpha_i of partition ``pid`` (one alpha for all, or one per client)."""
        if self.alpha.size == 1:
            return float(self.alpha[0])
        if pid >= self.alpha.size:
            raise ValueError(
                f"algorithm.params.alpha: has {self.alpha.size} values, no alpha for client {pid}"
            )
        return float(self.alpha[pid])

    def broadcast(self, state: RFedFairState, arrays: Sequence[np.ndarray]) -> RFedFairState:
        """The state once ``arrays`` is broadcast: its omega added to omega_tilde's sum."""
        omega, _ = split_theta_t(arrays)
        total = state.omega_sum
        if total is None:
            total = [np.zeros(a.shape, np.float64) for a in omega]
        total = [acc + a for acc, a in zip(total, omega, strict=True)]
        return replace(state, omega_sum=total, averaged_rounds=state.averaged_rounds + 1)

    def select(
        self, state: RFedFairState, p: dict[int, float], available: Sequence[int], server_round: int
    ) -> tuple[RFedFairState, dict[int, dict[str, Any]]]:
        """Z of Alg. 1 among the ``available`` partition ids (sorted): all of them (full),
        or K draws with replacement by p renormalised over them. Returns the state with
        the draw and each chosen client's fit config (its alpha_i, p_i, mu, beta_eta)."""
        alpha = {pid: self.alpha_of(pid) for pid in p}
        check_alpha(list(alpha.values()), list(p.values()), "algorithm.params.alpha")
        if self.clients_per_round is None:
            multiplicity = {pid: 1 for pid in available}
        else:
            probs = np.array([p[pid] for pid in available])
            drawn = draw_with_replacement(probs, self.clients_per_round, self.seed, server_round)
            multiplicity = {available[k]: c for k, c in drawn.items()}
        configs = {
            pid: {RCFL_ALPHA: alpha[pid], RCFL_P: p[pid], RCFL_MU: self.mu, LR_ETA: self.lr_eta}
            for pid in available
            if pid in multiplicity
        }
        return replace(state, multiplicity=multiplicity), configs

    def fit_configs(
        self,
        state: RFedFairState,
        partition_of: Mapping[N, int],
        sizes: Mapping[int, int],
        server_round: int,
    ) -> tuple[RFedFairState, list[tuple[N, dict[str, Any]]]]:
        """Z of the round among the available nodes ``partition_of`` (node -> partition
        id, any node names), with p_i = m_i / m over ``sizes`` (partition id -> m_i of
        every client known): the state with the draw, and (node, its fit config) for
        each chosen node in partition-id order (:meth:`select`). Both Flower faces send
        exactly these."""
        m = sum(sizes.values())
        p = dict(sorted((pid, size / m) for pid, size in sizes.items()))
        nodes = sorted(partition_of, key=partition_of.__getitem__)
        pids = [partition_of[node] for node in nodes]
        state, configs = self.select(state, p, pids, server_round)
        return state, [(node, configs[pid]) for node, pid in zip(nodes, pids) if pid in configs]

    def aggregate(
        self, state: RFedFairState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[RFedFairState]:
        """The p_i-weighted average of the returns (full), or their mean with a client
        drawn c times counted c times (partial)."""
        if not replies:
            return Outcome(state, {}, aggregated=False)
        full = self.clients_per_round is None
        weighted = [
            (r.arrays(), r.num_examples if full else state.multiplicity[r.partition_id])
            for r in replies
        ]
        new = weighted_average(weighted)
        return Outcome(replace(state, arrays=new), {THRESHOLD_ETA: float(new[-1].reshape(-1)[0])})

    def averaged_omega(self, state: RFedFairState) -> NDArrays | None:
        """omega_tilde_T: the mean of the omegas broadcast so far (None before round 1)."""
        if state.omega_sum is None:
            return None
        return [(s / state.averaged_rounds).astype(np.float32) for s in state.omega_sum]

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        omega, eta = split_theta_t(arrays)
        return omega, {THRESHOLD_ETA: eta}

    def diagnostics(self, state: RFedFairState) -> dict[str, Any]:
        return {THRESHOLD_ETA: split_theta_t(state.arrays)[1]}


# ------------------------------------------------------------------ Flower adapter
class RFedFair(CoreStrategy):
    """rFedFair (Alg. 1) as a Flower Strategy over :class:`RFedFairCore`.

    Global parameters are omega's arrays followed by eta as a 1-element array (the
    layout of :func:`~fedram_flwr.protocol.join_theta_t`). Each round every available
    client (full participation) or K draws with replacement by p_i
    (``clients_per_round=K``) receive (omega, eta) and a fit config with ``rcfl-alpha``
    (their alpha_i), ``rcfl-p`` (p_i), ``rcfl-mu`` and ``lr-eta``; they return
    (omega, eta) after kappa local steps on f^{mu,i} (``RCFLClient``). The new global
    (omega, eta) is the p_i-weighted average of the returns (full), or their mean with a
    client drawn c times counted c times (partial; its local steps are deterministic
    given (round, client), so one fit stands for its c copies).

    Who is sampled is the *server's* choice in the paper (Alg. 1: "server chooses a set
    of clients Z"), with every client reachable; so the strategy draws Z among the
    clients the ClientManager makes available, and an availability oracle (which models
    who can be reached) stays independent of it. Under restricted availability Z is
    drawn among the available clients with p renormalised over them.

    Clients must answer ``get_properties`` with ``partition-id`` (to index ``alpha``
    and make the draws engine-independent) and ``num-examples`` (m_i, giving
    p_i = m_i / m over all connected clients), and report ``partition-id`` in their fit
    metrics. eta lives in the global parameters (Alg. 1 averages and broadcasts it), so
    clients keep no state between rounds. ``evaluate_fn`` sees omega only; the reported
    metrics add ``eta`` and, under ``avg-``, the metrics of the running average
    omega_tilde_T = mean of the global omegas broadcast in rounds 1..T (Alg. 1's output,
    at the granularity the server sees: its local iterates stay on the clients).
    """

    def __init__(
        self,
        *,
        initial_arrays: NDArrays,
        alpha: float | Sequence[float],
        mu: float = 0.01,
        lr_eta: float = 0.01,
        eta_init: float = 0.0,
        clients_per_round: int | None = None,
        seed: int = 0,
        **fedavg_kwargs: Any,
    ) -> None:
        core = RFedFairCore(
            alpha=alpha,
            mu=mu,
            lr_eta=lr_eta,
            eta_init=eta_init,
            clients_per_round=clients_per_round,
            seed=seed,
        )
        super().__init__(core, initial_arrays=initial_arrays, **fedavg_kwargs)
        self.known: dict[str, tuple[int, int]] = {}  # cid -> (partition id, m_i)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self.state = self.core.broadcast(self.state, parameters_to_ndarrays(parameters))
        available = client_manager.sample(num_clients=client_manager.num_available())
        every = [*client_manager.all().values(), *available]
        placed = self.placements(client_manager, every, sizes=True)
        self.known.update({cid: (p.partition_id, p.num_examples) for cid, p in placed.items()})
        proxy_of = {proxy.cid: proxy for proxy in available}
        self.state, configs = self.core.fit_configs(
            self.state,
            {cid: self.known[cid][0] for cid in proxy_of},
            dict(self.known.values()),
            server_round,
        )
        base = self.on_fit_config_fn(server_round) if self.on_fit_config_fn else {}
        return [(proxy_of[cid], FitIns(parameters, {**base, **cfg})) for cid, cfg in configs]

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        """``evaluate_fn`` on omega, with eta and the ``avg-`` metrics of omega_tilde_T."""
        result = super().evaluate(server_round, parameters)
        if result is None:
            return None
        loss, metrics = result
        averaged = self.core.averaged_omega(self.state)
        if averaged is not None and (avg := self.evaluate_fn(server_round, averaged, {})):
            metrics["avg-loss"] = avg[0]
            metrics.update({f"avg-{k}": v for k, v in avg[1].items()})
        return loss, metrics
