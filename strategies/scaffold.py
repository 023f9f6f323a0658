"""SCAFFOLD: Stochastic Controlled Averaging.

S. P. Karimireddy, S. Kale, M. Mohri, S. Reddi, S. Stich, A. T. Suresh, "SCAFFOLD:
Stochastic Controlled Averaging for Federated Learning", ICML 2020, Algorithm 1 with
option II for the client control variate.

Server state (x, c); client i keeps c_i (zero at first) in its ``Context.state``.
A client in S receives (x, c) and, from y_i = x, takes K local steps

    y_i <- y_i - eta_l (g_i(y_i) - c_i + c)                            (line 10)
    c_i^+ = c_i - c + (x - y_i) / (K eta_l)                            (line 12, option II)

and returns y_i and Delta c_i = c_i^+ - c_i (line 13); the server steps

    x <- x + (eta_g / |S|) sum_{i in S} (y_i - x),   c <- c + (1/N) sum_{i in S} Delta c_i
                                                                       (lines 16-17)

The wire carries [x arrays..., c arrays...] to clients and [y_i..., Delta c_i...] back
(a model, as every client here returns, plus the control delta, which only the client
can form since c_i never leaves it).

Flower's Message API: ``Scaffold`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.objectives import scaffold_control_update
from fedram_flwr.protocol import (
    Arrays,
    ClientReply,
    join_model_control,
    split_model_control,
)
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.hyper import server_lr_hyper
from fedram_flwr.strategies.vector import VectorCore, VectorStrategy, flatten_into

__all__ = [
    "Scaffold",
    "ScaffoldCore",
    "ScaffoldState",
    "scaffold_control_update",
    "scaffold_server_update",
    "split_model_control",
]


# ------------------------------------------------------------------ pure functions
def scaffold_server_update(
    x: np.ndarray,
    c: np.ndarray,
    client_models: Sequence[np.ndarray],
    control_deltas: Sequence[np.ndarray],
    num_clients: int,
    server_lr: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Take SCAFFOLD's server step (Karimireddy et al. 2020, Alg. 1 lines 16-17).

    x <- x + (eta_g / |S|) sum_{i in S} (y_i - x) and c <- c + (1/N) sum_{i in S} Delta c_i.

    Parameters
    ----------
    x : np.ndarray
        Shape (d,): the global model.
    c : np.ndarray
        Shape (d,): the server control variate.
    client_models : sequence of np.ndarray
        y_i, shape (d,), of the clients in S (may be empty: nothing moves).
    control_deltas : sequence of np.ndarray
        Delta c_i = c_i^+ - c_i, shape (d,), of the same clients in the same order.
    num_clients : int
        N, the number of clients, >= 1.
    server_lr : float
        eta_g, the global learning rate, > 0 (the paper's default 1).

    Returns
    -------
    tuple of (np.ndarray, np.ndarray)
        The new (x, c); the inputs themselves when S is empty.
    """
    if not client_models:
        return x, c
    dx = np.mean([y - x for y in client_models], axis=0)
    dc = np.sum(control_deltas, axis=0) / num_clients
    return x + server_lr * dx, c + dc


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class ScaffoldState:
    """SCAFFOLD's server state.

    Parameters
    ----------
    x : np.ndarray
        Shape (d,), float32: the global model.
    c : np.ndarray
        Shape (d,), float32: the server control variate (zero at first).
    """

    x: np.ndarray
    c: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class ScaffoldCore(VectorCore[ScaffoldState]):
    """SCAFFOLD's core (Karimireddy et al., ICML 2020, Alg. 1, option II).

    Broadcasts (x, c) (c = 0 at first), steps by :func:`scaffold_server_update`;
    ``server_lr`` is eta_g. Pairs with ScaffoldClient.
    """

    server_lr: float = server_lr_hyper()

    def init(self, initial_arrays: Sequence[np.ndarray]) -> ScaffoldState:
        """Start from the initial model and c = 0."""
        x = self.vector(initial_arrays)
        return ScaffoldState(x, np.zeros_like(x))

    def arrays(self, state: ScaffoldState) -> Arrays:
        """Broadcast [x arrays..., c arrays...]."""
        return join_model_control(self.unflatten(state.x), self.unflatten(state.c))

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """Evaluate x only."""
        return split_model_control(arrays)[0], {}

    def aggregate(
        self, state: ScaffoldState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[ScaffoldState]:
        """Step (x, c) with the replies' models and control deltas (lines 16-17)."""
        if not replies:  # nobody available: (x, c) stay
            return Outcome(state, {}, aggregated=False)
        models, deltas = [], []
        for reply in replies:
            y, dc = split_model_control(reply.arrays())
            models.append(flatten_into(y, np.empty_like(state.x)))
            deltas.append(flatten_into(dc, np.empty_like(state.x)))
        x, c = (
            a.astype(np.float32)
            for a in scaffold_server_update(
                state.x, state.c, models, deltas, self.num_clients, self.server_lr
            )
        )
        diagnostics = {"lr": self.eta(server_round), "control-norm": float(np.linalg.norm(c))}
        return Outcome(ScaffoldState(x, c), diagnostics)


class Scaffold(VectorStrategy):
    """SCAFFOLD (Karimireddy et al., ICML 2020) as a Flower Strategy.

    Over :class:`ScaffoldCore`; ``evaluate_fn`` sees x only.
    """

    core_type = ScaffoldCore
