"""FedAR: local update Approximation and Rectification.

C. Jiang, H. Zhou, X. Zhang, S. Chakraborty, "FedAR: Addressing Client Unavailability
in Federated Learning with Local Update Approximation and Rectification", ECML PKDD
2024 (``papers/fedar_approximation-rectification.md``), Section 4, Algorithm 1.

The server keeps each client's latest update G_i (eq. 4) and inactive-round count
tau(i, t) (eq. 5) in :class:`~fedram_flwr.strategies.update_memory.UpdateMemory`,
weighs it by (eq. 6)

    psi_{i,t} = 0 if tau(i, t) >= g(t), else min((tau(i, t) + 1)^rho, 2),

and steps (eq. 7) w_{t+1} = w_t - (eta_t / N_t) sum_i psi_{i,t} G_i[t], where N_t
counts the contributing clients: seen at least once and psi_{i,t} > 0. (Alg. 1 lines
11-12 decrement N_t for every psi = 0, which would also subtract clients never seen;
the text says N_t counts "those clients that are either available or unavailable but
not too stale", which is what is done here.) g(t) is Section 5's: t0 + t / b for a
convex loss (Theorem 1, t0 > 0, b > 2) or c max(sqrt(t), sqrt(t0)) for a non-convex
one (Theorem 2, whose constant c = (1/4) sqrt(L / ((L^2 + beta lambda N) K N)) is
unknown in practice and is given as ``scale``). The paper gives no values for t0, b
or c. With every client available in every round, tau = 0, psi = 1, N_t = N and
eq. (7) is FedAvg's mean of the local models.

Flower's Message API: ``FedAR`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.update_memory import MemoryCore
from fedram_flwr.strategies.vector import VectorStrategy

PSI_MAX = 2.0  # Sec. 4: psi_max = 2 guarantees convergence
G_RULES = ("convex", "nonconvex")  # Sec. 5's cut-offs g(t), Theorems 1 and 2


# ------------------------------------------------------------------ pure functions
def g_convex(t: int, t0: float, b: float) -> float:
    """Return the convex cut-off g(t) = t0 + t / b (FedAR Sec. 5, Theorem 1).

    Parameters
    ----------
    t : int
        The round, >= 1.
    t0 : float
        > 0, rounds.
    b : float
        > 2.

    Returns
    -------
    float
        g(t), in rounds: updates at least this old are dropped (eq. 6).
    """
    return t0 + t / b


def g_nonconvex(t: int, t0: float, scale: float) -> float:
    """Return the non-convex cut-off g(t) = c max(sqrt(t), sqrt(t0)) (Sec. 5, Theorem 2).

    Parameters
    ----------
    t : int
        The round, >= 1.
    t0 : float
        > 0, rounds.
    scale : float
        c, > 0 (Theorem 2's constant, unknown in practice).

    Returns
    -------
    float
        g(t), in rounds.
    """
    return scale * math.sqrt(max(t, t0))


def fedar_weights(tau: np.ndarray, g_t: float, rho: float) -> np.ndarray:
    """Weigh the stored updates by staleness: FedAR eq. (6).

    psi_{i,t} = min((tau(i, t) + 1)^rho, 2), and 0 where tau(i, t) >= g(t).

    Parameters
    ----------
    tau : np.ndarray
        Shape (N,): tau(i, t), rounds since client i's update was stored (eq. 5), >= 0.
    g_t : float
        g(t), the cut-off in rounds (:func:`g_convex`, :func:`g_nonconvex`).
    rho : float
        The staleness exponent, in [0, 1].

    Returns
    -------
    np.ndarray
        psi, shape (N,), in {0} and [1, 2].
    """
    psi = np.minimum((np.asarray(tau, dtype=float) + 1.0) ** rho, PSI_MAX)
    return np.where(np.asarray(tau) >= g_t, 0.0, psi)


def fedar_direction(
    updates: np.ndarray, psi: np.ndarray, seen: np.ndarray
) -> tuple[np.ndarray | None, int]:
    """Return eq. (7)'s direction (1/N_t) sum_i psi_i G_i and N_t.

    One float32 matrix-vector product: ``updates`` is not copied.

    Parameters
    ----------
    updates : np.ndarray
        Shape (N, d), float32: row i is G_i, client i's latest update (eq. 4).
    psi : np.ndarray
        Shape (N,): the weights of eq. (6) (:func:`fedar_weights`).
    seen : np.ndarray
        Shape (N,), bool: whether client i ever replied.

    Returns
    -------
    tuple of (np.ndarray or None, int)
        The direction, shape (d,) (``None`` when N_t = 0), and N_t, the clients seen
        with psi_i > 0.
    """
    weights = np.where(seen, psi, 0.0).astype(np.float32)
    n_t = int(np.count_nonzero(weights))
    return (weights @ updates) / n_t if n_t else None, n_t


@dataclass(frozen=True, eq=False, kw_only=True)
class FedARCore(MemoryCore):
    """FedAR's core (Jiang et al., ECML PKDD 2024, Alg. 1).

    The memory weighed by eq. (6) with the cut-off g(t) of Sec. 5 (:meth:`cutoff`:
    :func:`g_convex` or :func:`g_nonconvex` with ``t0`` and ``b`` or ``scale``). The
    paper gives no values for t0, b and scale; the defaults drop updates that are
    10 + t/4 rounds old. Diagnostics add N_t (``contributing``) and g(t).
    """

    rho: float = hyper(0.1, doc="rho, the exponent of the staleness weight (eq. 6)", lo=0.0, hi=1.0)
    g: str = hyper(
        "convex",
        doc="the cut-off g(t) of Sec. 5: convex t0 + t / b (Theorem 1) or nonconvex "
        "scale max(sqrt(t), sqrt(t0)) (Theorem 2)",
        choices=G_RULES,
    )
    t0: float = hyper(10.0, doc="t0 of g(t) (> 0)", lo=0.0, lo_open=True)
    b: float = hyper(4.0, doc="b of the convex g(t) (> 2)", lo=2.0, lo_open=True)
    scale: float = hyper(4.0, doc="the constant c of the nonconvex g(t)", lo=0.0, lo_open=True)

    def cutoff(self, server_round: int) -> float:
        """Return g(t): updates at least this many rounds old are dropped (eq. 6)."""
        if self.g == "convex":
            return g_convex(server_round, self.t0, self.b)
        return g_nonconvex(server_round, self.t0, self.scale)

    def direction(self, server_round, memory, active, total_before):
        """Step along eq. (7): the seen updates weighed by eq. (6) over N_t."""
        g_t = self.cutoff(server_round)
        psi = fedar_weights(memory.tau, g_t, self.rho)
        v, n_t = fedar_direction(memory.updates, psi, memory.seen)
        return v, {"contributing": n_t, "g": g_t}


class FedAR(VectorStrategy):
    """FedAR (Jiang et al., ECML PKDD 2024, Alg. 1) as a Flower Strategy.

    Over :class:`FedARCore`; clients run plain local SGD (ERMClient) with the step size
    eta_t the strategy sends, and return their model.
    """

    core_type = FedARCore
