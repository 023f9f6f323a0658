"""FedAvg over the available clients with per-client aggregation weights: the
FedAR paper's FedAvg-IS and FedAvg(S=50) baselines (Sec. 6.1), and FedAU.

Every rule here is

    w_{t+1} = w_t - (1/N) sum_{i in A(t)} omega_i (w_t - w_{t,K}^i)

and they differ in omega_i:

- FedAvg(S): at most S of the available clients, drawn uniformly, omega_i = N / |S_t|
  (the mean of their models, FedAR eq. 3 over S_t);
- FedAvg-IS: omega_i = 1 / p_i, the inverse of client i's availability probability
  (Horvitz-Thompson: unbiased for the mean over all N clients). p_i is either the
  oracle's true value (oracle-informed, as FedAR's paper runs it) or, by default, CA-Fed's
  online estimate (Sec. IV-B, :func:`~fedram_flwr.strategies.ca_fed.pi_hat` with a
  Beta(1, 1) prior): p_hat_i = (rounds in which i was available up to t + 1) / (t + 2);
- FedAU: S. Wang, M. Ji, "A Lightweight Method for Tackling Unknown Participation
  Statistics in Federated Averaging", ICLR 2024 (arXiv:2306.03401), Algorithm 1 with
  its online weight estimation: omega_i is the mean of the participation intervals of
  client i observed *before* round t (an interval ends when i participates, or is cut
  at K rounds), and 1 until one has been observed. This is the paper's FedAU with the
  cut-off K (as in the authors' code, IBM/fedau); the weights are computed on the
  server from the participations it observes (they depend on nothing else), and the
  global step size is 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.common import FitIns, FitRes, Parameters, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.rng import stream
from fedram_flwr.strategies.ca_fed import pi_hat
from fedram_flwr.strategies.fedavg import client_id
from fedram_flwr.strategies.vector import VectorStrategy


# ------------------------------------------------------------------ pure functions
def reweighted_step(
    w: np.ndarray, client_models: Iterable[np.ndarray], weights: Sequence[float], num_clients: int
) -> np.ndarray:
    """w - (1/N) sum_i omega_i (w - w_i), accumulated in float64, one client at a time."""
    acc = np.zeros(w.shape, dtype=np.float64)
    for model, omega in zip(client_models, weights, strict=True):
        acc += omega * (w - model)
    return (w - acc / num_clients).astype(np.float32)


def subsample(num_available: int, max_clients: int, seed: int, server_round: int) -> np.ndarray:
    """Positions (sorted) of at most ``max_clients`` of ``num_available`` clients, drawn
    uniformly without replacement from a generator seeded by (seed, round)."""
    if num_available <= max_clients:
        return np.arange(num_available)
    rng = stream("fedavg-s-subsample", seed, server_round)
    return np.sort(rng.choice(num_available, size=max_clients, replace=False))


@dataclass(frozen=True)
class FedAUState:
    """Per-client interval statistics of FedAU's online estimator (Alg. 1)."""

    omega: np.ndarray  # running mean of the observed intervals
    count: np.ndarray  # M: intervals observed so far
    run: np.ndarray  # R: rounds in the interval still open

    @classmethod
    def zeros(cls, num_clients: int) -> FedAUState:
        z = np.zeros(num_clients, dtype=np.int64)
        return cls(np.zeros(num_clients), z, z)


def fedau_update(state: FedAUState, participated: np.ndarray, cutoff: int) -> FedAUState:
    """One round of FedAU's estimator: R <- R + 1; if i participated or R = K, the
    interval R closes: omega <- (M omega + R) / (M + 1) (omega = R when M = 0),
    M <- M + 1, R <- 0."""
    run = state.run + 1
    close = participated | (run >= cutoff)
    mean = (state.count * state.omega + run) / (state.count + 1)
    return FedAUState(
        omega=np.where(close, mean, state.omega),
        count=state.count + close,
        run=np.where(close, 0, run),
    )


class ReweightedFedAvg(VectorStrategy):
    """Steps by :func:`reweighted_step` with the omega_i of :meth:`weights`."""

    def weights(self, server_round: int, active: list[int], elapsed: int) -> np.ndarray:
        raise NotImplementedError

    def step(self, server_round: int, results: list[FitRes], elapsed: int) -> dict[str, Scalar]:
        active = [client_id(r) for r in results]
        omega = self.weights(server_round, active, elapsed)
        if active:
            models = (model for _, model in self.client_models(results))
            self.w[:] = reweighted_step(self.w, models, omega, self.num_clients)
        return {
            "lr": self.eta(server_round),
            "mean-weight": float(np.mean(omega)) if active else 0.0,
        }


class FedAvgIS(ReweightedFedAvg):
    """FedAvg-IS: omega_i = 1 / p_i with the oracle's ``known_p`` (oracle-informed) or,
    when it is ``None``, the estimate p_hat_i of round t, which counts round t itself
    (as CA-Fed's server does; rounds in which nobody was available count as rounds)."""

    def __init__(self, *, known_p: Sequence[float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if known_p is not None:
            p = np.asarray(known_p, dtype=float)
            if p.shape != (self.num_clients,) or np.any(p <= 0) or np.any(p > 1):
                raise ValueError(
                    f"oracle-informed p: need {self.num_clients} probabilities in (0, 1]"
                )
        self.known_p = None if known_p is None else p
        self.active_counts = np.zeros(self.num_clients, dtype=np.int64)

    def weights(self, server_round, active, elapsed):
        self.active_counts[active] += 1
        if self.known_p is not None:
            return 1.0 / self.known_p[active]
        return 1.0 / pi_hat(self.active_counts, server_round, 1.0, 1.0)[active]


class FedAvgSampled(ReweightedFedAvg):
    """FedAvg(S): the mean model of at most ``max_clients`` available clients."""

    def __init__(self, *, max_clients: int, seed: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if max_clients < 1:
            raise ValueError(f"algorithm.params.max_clients: {max_clients} must be >= 1")
        self.max_clients, self.seed = max_clients, seed

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Keeps a seeded subset of the oracle's clients (which come in partition order)."""
        pairs = super().configure_fit(server_round, parameters, client_manager)
        return [pairs[k] for k in subsample(len(pairs), self.max_clients, self.seed, server_round)]

    def weights(self, server_round, active, elapsed):
        return np.full(len(active), self.num_clients / max(len(active), 1))


def fedau_weights(state: FedAUState) -> np.ndarray:
    """FedAU's omega_i: the mean observed interval, 1 before any was observed."""
    return np.where(state.count > 0, state.omega, 1.0)


class FedAU(ReweightedFedAvg):
    """FedAU: omega_i of :func:`fedau_weights` from the rounds before t, then
    :func:`fedau_update` with round t; skipped rounds (nobody available) count as
    rounds without participation. ``cutoff`` is the paper's K."""

    def __init__(self, *, cutoff: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if cutoff < 1:
            raise ValueError(f"algorithm.params.cutoff: {cutoff} must be >= 1")
        self.cutoff = cutoff
        self.estimates = FedAUState.zeros(self.num_clients)

    def weights(self, server_round, active, elapsed):
        none = np.zeros(self.num_clients, dtype=bool)
        for _ in range(elapsed - 1):
            self.estimates = fedau_update(self.estimates, none, self.cutoff)
        omega = fedau_weights(self.estimates)[active]
        participated = none.copy()
        participated[active] = True
        self.estimates = fedau_update(self.estimates, participated, self.cutoff)
        return omega
