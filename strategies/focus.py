"""FOCUS: Federated Optimization with exact Convergence via pUsh-pull Strategy.

B. Ying, Z. Li, H. Yang, "Exact and Linear Convergence for Federated Learning under
Arbitrary Client Participation is Attainable", NeurIPS 2025 (arXiv 2503.20117), written
after the authors' code (github.com/BichengYing/FedASL, where FOCUS is ``FedASL``):
``FedASL/server.py`` ``FedASLServer.train_one_step`` (the server) and
``FedASL/client.py`` ``FedASLClient.local_update`` / ``push_step`` (the client).

Server state (x, y): the model and the tracked gradient sum, y = 0 at first. Client i
keeps g_i^prev, the gradient of its last local step in the last round it trained (zero at
first), in its ``Context.state``. A client in S_t receives x and, from x_0 = x, takes K
local steps on the tracking direction

    g_k = grad f_i(x_k; xi_k),   x_{k+1} = x_k - eta (g_k - g_i^prev)   (k = 0..K-1)

and pushes y_i = g_{K-1} - g_i^prev (``push_step``), keeping g_i^prev <- g_{K-1}. The
server *sums* the pushes (a column-stochastic push, not FedAvg's average) and steps

    y <- y + sum_{i in S_t} y_i,   x <- x - eta y.

Summed over rounds the pushes telescope: y = sum_i g_i^last, every client's most recent
gradient with weight 1 whether it trains often or rarely, which is why the fixed point is
the minimiser of F(x) = (1/N) sum_i f_i under any participation (the paper's eq. 1).

The paper's algorithm box could not be read here (only its abstract and introduction,
which state the objective), so every detail is the code's:

- the authors' client computes K gradients and takes K - 1 model steps (the model after
  the last gradient is never used); here the client takes K steps, the last one
  discarded: the same K gradients, the same push;
- a round with no participant moves nothing (``train_one_step`` returns before the
  server step), so x and y stay;
- the server and the clients step with the same eta (``lr``), sent as the clients'
  ``lr``; ``lr_decay`` 1 keeps it constant, as the authors do.

A reduction that follows from the rule: with K = 1 and every client in every round,
FOCUS is gradient descent on sum_i f_i = N F with step eta (x_{t+1} = x_t - eta sum_i
grad f_i(x_t)).

The wire carries x to the clients and y_i back (arrays shaped like the model, not a
model). Flower's Message API: ``Focus`` in :mod:`fedram_flwr.message_api` (same core).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.vector import VectorCore, VectorStrategy, client_models

__all__ = ["Focus", "FocusCore", "FocusState", "focus_server_update"]


# ------------------------------------------------------------------ pure functions
def focus_server_update(
    x: np.ndarray, y: np.ndarray, pushes: Sequence[np.ndarray], lr: float
) -> tuple[np.ndarray, np.ndarray]:
    """Take FOCUS's server step (``FedASL/server.py``, ``FedASLServer.train_one_step``).

    y <- y + sum_{i in S} y_i, then x <- x - eta y.

    Parameters
    ----------
    x : np.ndarray
        Shape (d,): the global model.
    y : np.ndarray
        Shape (d,): the tracked gradient sum.
    pushes : sequence of np.ndarray
        The pushed y_i, shape (d,), of the clients in S (empty: nothing moves).
    lr : float
        eta, the step size, > 0.

    Returns
    -------
    tuple of (np.ndarray, np.ndarray)
        The new (x, y); the inputs themselves when S is empty.
    """
    if not len(pushes):
        return x, y
    y_new = y + np.sum(pushes, axis=0)
    return x - lr * y_new, y_new


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class FocusState:
    """FOCUS's server state.

    Parameters
    ----------
    x : np.ndarray
        Shape (d,), float32: the global model.
    y : np.ndarray
        Shape (d,), float32: the tracked gradient sum (zero at first).
    """

    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class FocusCore(VectorCore[FocusState]):
    """FOCUS's core (Ying, Li, Yang, NeurIPS 2025; the authors' ``FedASLServer``).

    Broadcasts x, steps by :func:`focus_server_update` with eta_t (``lr``, the clients'
    step size too). Pairs with FocusClient, whose replies are the pushed y_i.
    """

    def init(self, initial_arrays: Sequence[np.ndarray]) -> FocusState:
        """Start from the initial model and y = 0."""
        x = self.vector(initial_arrays)
        return FocusState(x, np.zeros_like(x))

    def arrays(self, state: FocusState) -> Arrays:
        """Broadcast x."""
        return self.unflatten(state.x)

    def aggregate(
        self, state: FocusState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[FocusState]:
        """Add the replies' pushes to y and step x (``train_one_step``)."""
        if not replies:  # nobody trained: (x, y) stay, as the authors' code returns early
            return Outcome(state, {}, aggregated=False)
        pushes = np.stack([push.copy() for _, push in client_models(replies, state.x)])
        lr = self.eta(server_round)
        x, y = (a.astype(np.float32) for a in focus_server_update(state.x, state.y, pushes, lr))
        return Outcome(FocusState(x, y), {"lr": lr, "tracking-norm": float(np.linalg.norm(y))})


class Focus(VectorStrategy):
    """FOCUS (Ying, Li, Yang, NeurIPS 2025) as a Flower Strategy, over :class:`FocusCore`."""

    core_type = FocusCore
