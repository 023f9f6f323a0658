"""The baselines CA-Fed is compared with (Rodio et al., IEEE/ACM ToN 2024, Sec. V-A c),
as cores on :class:`~fedram_flwr.strategies.ca_fed.AvailabilityAwareCore` with thin Flower
adapters:
every active client trains, the server takes the step of eq. 3 with weights q^(t).

- Unbiased: q_k = alpha_k / pi_k for every active client (Thm. 1's unbiased choice);
- More available: the same weights for the "more available" clients (pi_k >= 1/2 in
  the paper's population), the others always excluded;
- AdaFed (Tan et al., "AdaFed: Optimizing Participation-Aware Federated Learning with
  Adaptive Aggregation Weights", IEEE TNSE 2022): alpha_k / pi_k normalised over the
  active clients, q_k = (alpha_k / pi_k) / sum_{h in A_t} alpha_h / pi_h;
- F3AST (Ribero, Vikalo, de Veciana, "Federated Learning Under Intermittent Client
  Availability and Time-Varying Communication Constraints", IEEE JSTSP 17(1), 2023):
  under a budget of m clients per round, the m active clients with the largest
  alpha_k^2 / r_k^2 take part with weights alpha_k / r_k, favouring the less available
  ones. r_k is F3AST's estimate of client k's participation rate; as in CA-Fed's
  experiments, where every algorithm receives pi (Sec. V-A c), r_k = pi_k here
  (oracle or estimated) rather than F3AST's own exponentially smoothed rate.

``pi`` is the oracle's true availability in oracle-informed scenarios and the Beta
posterior mean pi_hat (Sec. IV-B) otherwise.

Flower's Message API: ``Unbiased``, ``MoreAvailable``, ``AdaFed``, ``F3AST``
in :mod:`fedram_flwr.message_api` (same core, same arguments).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedram_flwr.strategies.ca_fed import (
    AvailabilityAwareCore,
    AvailabilityAwareStrategy,
    unbiased_weights,
)


# ------------------------------------------------------------------ weights
def adafed_weights(alpha: np.ndarray, pi: np.ndarray, active: np.ndarray) -> np.ndarray:
    """AdaFed: q_k = (alpha_k / pi_k) / sum_{h in A_t} alpha_h / pi_h on the active
    clients, 0 elsewhere (CA-Fed Sec. V-A c)."""
    w = np.where(active, unbiased_weights(alpha, pi), 0.0)
    return w / w.sum()


def more_available_weights(alpha: np.ndarray, pi: np.ndarray, min_pi: float) -> np.ndarray:
    """More available: q_k = alpha_k / pi_k if pi_k >= min_pi, else 0."""
    return np.where(pi >= min_pi, unbiased_weights(alpha, pi), 0.0)


def f3ast_weights(
    alpha: np.ndarray, rate: np.ndarray, active: np.ndarray, budget: int
) -> np.ndarray:
    """F3AST: the ``budget`` active clients with the largest alpha_k^2 / r_k^2 (ties:
    lower id) get q_k = alpha_k / r_k; every other client 0."""
    w = unbiased_weights(alpha, rate)
    ranked = np.argsort(-np.where(active, w, -np.inf), kind="stable")
    chosen = ranked[: min(budget, int(np.count_nonzero(active)))]
    q = np.zeros_like(w)
    q[chosen] = w[chosen]
    return q


# ------------------------------------------------------------------------ cores
@dataclass(frozen=True, eq=False, kw_only=True)
class UnbiasedCore(AvailabilityAwareCore):
    """Unbiased aggregation: q = alpha / pi (CA-Fed Sec. V-A c, baseline 1)."""

    def weights(self, state, active, replies):
        return unbiased_weights(self.alpha, self.availability(state)[0]), {}, state


@dataclass(frozen=True, eq=False, kw_only=True)
class MoreAvailableCore(AvailabilityAwareCore):
    """Only the clients with pi_k >= ``min_pi`` (CA-Fed Sec. V-A c, baseline 2)."""

    min_pi: float = 0.5

    def weights(self, state, active, replies):
        pi = self.availability(state)[0]
        return more_available_weights(self.alpha, pi, self.min_pi), {}, state


@dataclass(frozen=True, eq=False, kw_only=True)
class AdaFedCore(AvailabilityAwareCore):
    """AdaFed with full participation of the active clients (baseline 3)."""

    def weights(self, state, active, replies):
        return adafed_weights(self.alpha, self.availability(state)[0], active), {}, state


@dataclass(frozen=True, eq=False, kw_only=True)
class F3ASTCore(AvailabilityAwareCore):
    """F3AST with a budget of ``clients_per_round`` participants (baseline 4)."""

    clients_per_round: int

    def __post_init__(self) -> None:
        if self.clients_per_round < 1:
            raise ValueError(
                f"algorithm.params.clients_per_round: {self.clients_per_round} must be >= 1"
            )
        super().__post_init__()

    def weights(self, state, active, replies):
        rate = self.availability(state)[0]
        return f3ast_weights(self.alpha, rate, active, self.clients_per_round), {}, state


# --------------------------------------------------------------- Flower adapters
class Unbiased(AvailabilityAwareStrategy):
    """Unbiased over :class:`UnbiasedCore`."""

    core_type = UnbiasedCore


class MoreAvailable(AvailabilityAwareStrategy):
    """More available over :class:`MoreAvailableCore` (``min_pi``)."""

    core_type = MoreAvailableCore
    core_params = ("min_pi",)


class AdaFed(AvailabilityAwareStrategy):
    """AdaFed over :class:`AdaFedCore`."""

    core_type = AdaFedCore


class F3AST(AvailabilityAwareStrategy):
    """F3AST over :class:`F3ASTCore` (``clients_per_round``)."""

    core_type = F3ASTCore
    core_params = ("clients_per_round",)
