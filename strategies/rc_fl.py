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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.common import (
    FitIns,
    FitRes,
    GetPropertiesIns,
    NDArrays,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy.aggregate import aggregate

from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.rng import stream
from fedram_flwr.strategies.fed_cvar_avg import join_theta_t, split_theta_t
from fedram_flwr.strategies.fedavg import FedAvg, in_partition_order

NUM_EXAMPLES = "num-examples"
ALPHA_KEY, P_KEY, MU_KEY, LR_ETA_KEY = "rcfl-alpha", "rcfl-p", "rcfl-mu", "lr-eta"


# ------------------------------------------------------------------ pure functions
def softplus_mu(x: np.ndarray | float, mu: float) -> np.ndarray:
    """phi_mu(x) = mu log(1 + e^{x / mu}) (Sec. 4), exact for any x / mu:
    mu (max(z, 0) + log1p(e^{-|z|})) with z = x / mu never overflows."""
    z = np.asarray(x, dtype=float) / mu
    return mu * (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z))))


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    """phi_mu'(x) = sigmoid(x / mu), computed without overflow for any z."""
    z = np.asarray(z, dtype=float)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def rcfl_local_objective(loss, eta: float, alpha, mu: float) -> np.ndarray:
    """f^{mu,i}(omega, eta) = (1 / alpha_i) phi_mu(f_i - eta) + eta (eq. 5)."""
    return softplus_mu(np.asarray(loss, dtype=float) - eta, mu) / np.asarray(alpha) + eta


def rcfl_gradient_weights(loss: float, eta: float, alpha: float, mu: float) -> tuple[float, float]:
    """(d f^{mu,i} / d f_i, d f^{mu,i} / d eta) at a loss value f_i (eq. 5):
    s / alpha_i and 1 - s / alpha_i with s = sigmoid((f_i - eta) / mu), so
    grad_omega f^{mu,i} = (s / alpha_i) grad_omega f_i (Alg. 1's local step)."""
    s = float(sigmoid((loss - eta) / mu)) / alpha
    return s, 1.0 - s


def rcfl_dual(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """F_alpha(omega, eta) = eta + sum_i (p_i / alpha_i) (f_i - eta)_+ (eq. 2/4), for
    one eta or an array of them."""
    eta = np.asarray(eta, dtype=float)
    return eta + np.maximum(-np.subtract.outer(eta, losses), 0.0) @ (p / alpha)


def rcfl_smoothed(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray, mu: float):
    """F^mu_alpha(omega, eta) = sum_i p_i f^{mu,i} (eq. 5), for one eta or an array."""
    eta = np.asarray(eta, dtype=float)
    return eta + softplus_mu(-np.subtract.outer(eta, losses), mu) @ (p / alpha)


def hcvar(losses: Sequence[float], p: Sequence[float], alpha: Sequence[float] | float) -> float:
    """HCVaR_{1-alpha} of the client losses = f_alpha, the primal of eq. (1) solved
    exactly: the weight mass q_i p_i (at most p_i / alpha_i each, 1 in total) fills the
    clients in decreasing order of loss. Any alpha_i in (0, 1] is allowed (alpha_i < p_i
    acts as alpha_i = p_i); p is normalised."""
    f = np.asarray(losses, dtype=float)
    p = np.asarray(p, dtype=float) / np.sum(p)
    cap = p / np.broadcast_to(np.asarray(alpha, dtype=float), f.shape)
    order = np.argsort(-f, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(cap[order])[:-1]])
    mass = np.clip(1.0 - before, 0.0, cap[order])
    return float(mass @ f[order])


def check_alpha(alpha: Sequence[float], p: Sequence[float], field: str = "alpha") -> None:
    """alpha_i must lie in [p_i, 1] (Def. 1); the error names the clients and bounds."""
    a, q = np.asarray(alpha, dtype=float), np.asarray(p, dtype=float)
    bad = np.flatnonzero((a < q - 1e-12) | (a > 1.0) | ~np.isfinite(a))
    if bad.size:
        pairs = ", ".join(f"client {i}: {a[i]:g} not in [{q[i]:.4g}, 1]" for i in bad[:5])
        raise ValueError(f"{field}: alpha_i must lie in [p_i, 1] with p_i = m_i / m ({pairs})")


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


# ------------------------------------------------------------------ Flower adapter
class RFedFair(FedAvg):
    """rFedFair (Alg. 1) as a Flower Strategy.

    Global parameters are omega's arrays followed by eta as a 1-element array (the
    layout of :func:`~fedram_flwr.strategies.fed_cvar_avg.join_theta_t`). Each round
    every available client (full participation) or K draws with replacement by p_i
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
        initial_omega: NDArrays,
        alpha: float | Sequence[float],
        mu: float = 0.01,
        lr_eta: float = 0.01,
        eta_init: float = 0.0,
        clients_per_round: int | None = None,
        seed: int = 0,
        **fedavg_kwargs,
    ) -> None:
        a = np.atleast_1d(np.asarray(alpha, dtype=float))
        if np.any(a <= 0) or np.any(a > 1):
            raise ValueError(f"algorithm.params.alpha: {a.tolist()} must lie in (0, 1]")
        if mu <= 0 or lr_eta < 0:
            raise ValueError(f"algorithm.params: mu ({mu}) must be > 0, lr_eta ({lr_eta}) >= 0")
        if clients_per_round is not None and clients_per_round < 1:
            raise ValueError(f"algorithm.params.clients_per_round: {clients_per_round} < 1")
        super().__init__(
            initial_parameters=ndarrays_to_parameters(join_theta_t(initial_omega, eta_init)),
            **fedavg_kwargs,
        )
        self.alpha, self.mu, self.lr_eta = a, mu, lr_eta
        self.clients_per_round, self.seed = clients_per_round, seed
        self.known: dict[str, tuple[int, int]] = {}  # cid -> (partition id, m_i)
        self.multiplicity: dict[int, int] = {}  # partition id -> times drawn this round
        self.omega_sum: list[np.ndarray] | None = None
        self.averaged_rounds = 0

    def __repr__(self) -> str:
        k = self.clients_per_round or "full"
        return f"RFedFair(alpha={self.alpha.tolist()}, mu={self.mu}, lr_eta={self.lr_eta}, K={k})"

    def learn_clients(self, proxies: Sequence[ClientProxy]) -> None:
        for proxy in proxies:
            if proxy.cid not in self.known:
                res = proxy.get_properties(GetPropertiesIns(config={}), timeout=None, group_id=None)
                props = res.properties
                self.known[proxy.cid] = (int(props[PARTITION_ID]), int(props[NUM_EXAMPLES]))

    def alpha_of(self, pid: int) -> float:
        """alpha_i of partition ``pid`` (one alpha for all, or one per client)."""
        if self.alpha.size == 1:
            return float(self.alpha[0])
        if pid >= self.alpha.size:
            raise ValueError(
                f"algorithm.params.alpha: has {self.alpha.size} values, no alpha for client {pid}"
            )
        return float(self.alpha[pid])

    def client_p(self) -> dict[int, float]:
        """p_i = m_i / m over every client seen (partition id -> p_i)."""
        m = sum(n for _, n in self.known.values())
        return {pid: n / m for pid, n in self.known.values()}

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self.add_to_average(parameters)
        available = client_manager.sample(num_clients=client_manager.num_available())
        self.learn_clients([*client_manager.all().values(), *available])
        p = dict(sorted(self.client_p().items()))  # partition ids 0..N-1 when all connected
        alpha = {pid: self.alpha_of(pid) for pid in p}
        check_alpha(list(alpha.values()), list(p.values()), "algorithm.params.alpha")
        available = sorted(available, key=lambda c: self.known[c.cid][0])
        pids = [self.known[c.cid][0] for c in available]
        if self.clients_per_round is None:
            self.multiplicity = {pid: 1 for pid in pids}
        else:
            probs = np.array([p[pid] for pid in pids])
            drawn = draw_with_replacement(probs, self.clients_per_round, self.seed, server_round)
            self.multiplicity = {pids[k]: c for k, c in drawn.items()}
        base = self.on_fit_config_fn(server_round) if self.on_fit_config_fn else {}
        return [
            (
                proxy,
                FitIns(
                    parameters,
                    {
                        **base,
                        ALPHA_KEY: alpha[pid],
                        P_KEY: p[pid],
                        MU_KEY: self.mu,
                        LR_ETA_KEY: self.lr_eta,
                    },
                ),
            )
            for proxy, pid in zip(available, pids)
            if pid in self.multiplicity
        ]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if not results or (failures and not self.accept_failures):
            return None, {}
        ordered = in_partition_order(results)
        full = self.clients_per_round is None
        weighted = [
            (
                parameters_to_ndarrays(r.parameters),
                r.num_examples if full else self.multiplicity[int(r.metrics[PARTITION_ID])],
            )
            for r in ordered
        ]
        new = aggregate(weighted)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn:
            metrics = self.fit_metrics_aggregation_fn(
                [(r.num_examples, r.metrics) for r in ordered]
            )
        return ndarrays_to_parameters(new), {**metrics, "eta": float(new[-1].reshape(-1)[0])}

    def add_to_average(self, parameters: Parameters) -> None:
        """Add the omega broadcast this round to the running sum of omega_tilde_T."""
        omega, _ = split_theta_t(parameters_to_ndarrays(parameters))
        if self.omega_sum is None:
            self.omega_sum = [np.zeros(a.shape, np.float64) for a in omega]
        for acc, a in zip(self.omega_sum, omega, strict=True):
            acc += a
        self.averaged_rounds += 1

    def averaged_omega(self) -> NDArrays | None:
        """omega_tilde_T: the mean of the omegas broadcast so far (None before round 1)."""
        if self.omega_sum is None:
            return None
        return [(s / self.averaged_rounds).astype(np.float32) for s in self.omega_sum]

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        if self.evaluate_fn is None:
            return None
        omega, eta = split_theta_t(parameters_to_ndarrays(parameters))
        result = self.evaluate_fn(server_round, omega, {})
        if result is None:
            return None
        loss, metrics = result
        metrics = {**metrics, "eta": eta}
        averaged = self.averaged_omega()
        if averaged is not None and (avg := self.evaluate_fn(server_round, averaged, {})):
            metrics["avg-loss"] = avg[0]
            metrics.update({f"avg-{k}": v for k, v in avg[1].items()})
        return loss, metrics
