"""Amplified SCAFFOLD.

M. Crawshaw, M. Liu, "Federated Learning under Periodic Client Participation and
Heterogeneous Data: A New Communication-Efficient Algorithm and Analysis", NeurIPS 2024;
authors' code: github.com/MingruiLiu-ML-Lab/FL-under-Periodic-Participation
(``synthetic/train.py``, function ``train``; ``image_classification/main.py`` with
``util/util.py: Correction`` and ``model/optim.py: CorrectedSGD``).

Participation is periodic: over each window of P rounds every client has the same
chance to participate (cyclic participation is the case the paper analyses; the
``cyclic`` oracle with ``groups`` and ``clients_per_round`` is the authors' setting).
Rounds are FedAvg rounds with SCAFFOLD's drift correction, but the control variates
and an amplified server step change only once per period:

- a client in S_t receives (x, c) and takes K local steps y <- y - eta (g_i(y) - c_i + c)
  (``CorrectedSGD.step``: d_p = grad - c_i + c);
- the server averages the models, x <- x + (1/|S_t|) sum_{i in S_t} (y_i - x) (``train``:
  ``global_x = np.mean(trained_models)``; SCAFFOLD's line 16 with eta_g = 1);
- at the end of each period (server round r with r mod P = 0; ``train``: (r+1) % P == 0
  with r from 0): x <- x_0 + gamma (x - x_0), x_0 the model at the start of the period
  (``amplify_x``), then x_0 <- x; each client that trained during the period sets c_i to
  the mean of the stochastic gradients it computed in it, the others keep theirs, and
  c = (1/N) sum_i c_i (``correction == "period"``; ``Correction.reset``).

On the wire (SCAFFOLD's, :mod:`~fedram_flwr.strategies.scaffold`): [x, c] out, [y_i,
D_i] back, where D_i = c_i^new - c_i is the client's running value for the period:
the K-weighted mean over its rounds in the period of option II's Delta c_i
(= mean gradient of the round - c_i for plain SGD). The server keeps each client's last
D_i of the period and, at its end, c <- c + (1/N) sum_i D_i; the client adopts
c_i <- c_i + D_i when a later period's ``period`` key reaches it
(:func:`~fedram_flwr.clients.scaffold.fit_amplified_scaffold`).

Reductions: with P = 1 and gamma = 1 this is SCAFFOLD with eta_g = 1 (option II: c_i^+ is
the mean gradient of the round), as the authors' own SCAFFOLD baseline (``correction
"round"``, gamma 1); with gamma = 1 and no correction, FedAvg.

Choices: the local step size is ``training.lr`` (the image-classification scripts pass
eta directly, e.g. 0.00667 = 0.01 / 1.5; ``synthetic/train.py`` divides lr by gamma);
defaults P = 20, gamma = 1.5 are the authors' FashionMNIST run
(``run_scripts/fashion_logreg.py``); if the server aggregates no round at a period's end
(Flower's stock server skips rounds with nobody available) the period closes at the next
aggregation, before that round's models are averaged.

Flower's Message API: ``AmplifiedScaffold`` in :mod:`fedram_flwr.message_api`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedram_flwr.protocol import (
    PERIOD,
    Arrays,
    ClientReply,
    join_model_control,
    split_model_control,
)
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.scaffold import scaffold_server_update
from fedram_flwr.strategies.vector import VectorCore, VectorStrategy, flatten_into


# ------------------------------------------------------------------ pure functions
def period_of(server_round: int, period: int) -> int:
    """Return the period (from 0) that server round r (from 1) belongs to: (r - 1) // P.

    Parameters
    ----------
    server_round : int
        r, >= 1.
    period : int
        P, rounds, >= 1.

    Returns
    -------
    int
        The period's index, >= 0.
    """
    return (server_round - 1) // period


def amplify(anchor: np.ndarray, x: np.ndarray, gamma: float) -> np.ndarray:
    """Return x_0 + gamma (x - x_0), the amplified step over a period.

    Computed as x + (gamma - 1)(x - x_0) (``main.py``: ``w_global += (step_size_global -
    1.0) * (w_global - w_prev)``), which leaves x exactly as it is when gamma = 1.

    Parameters
    ----------
    anchor : np.ndarray
        x_0, the model at the period's start.
    x : np.ndarray
        The model at the period's end.
    gamma : float
        The amplification, > 0.

    Returns
    -------
    np.ndarray
        The amplified model.
    """
    return x + (gamma - 1.0) * (x - anchor)


def period_control_update(
    c: np.ndarray, control_deltas: Sequence[np.ndarray], num_clients: int
) -> np.ndarray:
    """Return c + (1/N) sum_i D_i over the clients that trained in the period.

    c stays the mean of all N c_i (``Correction.reset``: global -= old c_i / N, global +=
    new c_i / N).

    Parameters
    ----------
    c : np.ndarray
        The server's control variate.
    control_deltas : sequence of np.ndarray
        The period's D_i, one per client that trained in it.
    num_clients : int
        N, >= 1.

    Returns
    -------
    np.ndarray
        The new c.
    """
    if not control_deltas:
        return c
    return c + np.sum(control_deltas, axis=0) / num_clients


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class AmplifiedScaffoldState:
    """Amplified SCAFFOLD's server state.

    x and c (float32 vectors), the model x_0 at the start of ``period``, and each
    client's last D_i of that period (partition id -> vector).
    """

    x: np.ndarray
    c: np.ndarray
    anchor: np.ndarray
    period: int = 0
    pending: Mapping[int, np.ndarray] = field(default_factory=dict)


def close_period(
    state: AmplifiedScaffoldState, gamma: float, num_clients: int, next_period: int
) -> AmplifiedScaffoldState:
    """Close a period: x amplified from x_0, c updated by the period's D_i.

    Parameters
    ----------
    state : AmplifiedScaffoldState
        The state at the period's end.
    gamma : float
        The amplification, > 0.
    num_clients : int
        N, >= 1.
    next_period : int
        The index of the period that starts.

    Returns
    -------
    AmplifiedScaffoldState
        The state of the next period (x_0 = the amplified x, no pending D_i).
    """
    x = amplify(state.anchor, state.x, gamma).astype(np.float32)
    c = period_control_update(state.c, list(state.pending.values()), num_clients)
    return AmplifiedScaffoldState(x, c.astype(np.float32), x, next_period, {})


@dataclass(frozen=True, eq=False, kw_only=True)
class AmplifiedScaffoldCore(VectorCore[AmplifiedScaffoldState]):
    """Amplified SCAFFOLD's server (Crawshaw and Liu 2024).

    Broadcasts (x, c) and the round's period; averages the models each round and closes
    each period (:func:`close_period`). Pairs with AmplifiedScaffoldClient.
    """

    period: int = hyper(
        20, doc="P, the rounds of a period (the authors' FashionMNIST run: 20)", lo=1
    )
    amplification: float = hyper(
        1.5,
        doc="gamma, the amplification at a period's end, x <- x_0 + gamma (x - x_0) "
        "(the authors': 1.5)",
        lo=0.0,
        lo_open=True,
    )

    def init(self, initial_arrays: Sequence[np.ndarray]) -> AmplifiedScaffoldState:
        """Start from x = the model, c = 0, x_0 = x."""
        x = self.vector(initial_arrays)
        return AmplifiedScaffoldState(x, np.zeros_like(x), x.copy())

    def arrays(self, state: AmplifiedScaffoldState) -> Arrays:
        """Broadcast (x, c)."""
        return join_model_control(self.unflatten(state.x), self.unflatten(state.c))

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """Evaluate x alone."""
        return split_model_control(arrays)[0], {}

    def fit_config(self, state: AmplifiedScaffoldState, server_round: int) -> dict[str, Any]:
        """Send eta_t and the round's period index."""
        return {**super().fit_config(state, server_round), PERIOD: self.period_index(server_round)}

    def period_index(self, server_round: int) -> int:
        """Return the period of ``server_round`` (:func:`period_of`)."""
        return period_of(server_round, self.period)

    def aggregate(
        self,
        state: AmplifiedScaffoldState,
        server_round: int,
        replies: Sequence[ClientReply],
        elapsed: int,
    ) -> Outcome[AmplifiedScaffoldState]:
        """Average the returned models; close the period when it ends (:func:`close_period`)."""
        now = self.period_index(server_round)
        moved = state.period < now  # a period ended in rounds the server skipped
        if moved:
            state = close_period(state, self.amplification, self.num_clients, now)
        if replies:
            models, pending = [], dict(state.pending)
            for reply in replies:
                y, d = split_model_control(reply.arrays())
                models.append(flatten_into(y, np.empty_like(state.x)))
                pending[reply.partition_id] = flatten_into(d, np.empty_like(state.x))
            x = scaffold_server_update(state.x, state.c, models, [], self.num_clients)[0]
            state = AmplifiedScaffoldState(x, state.c, state.anchor, state.period, pending)
        closes = server_round % self.period == 0
        if closes:
            state = close_period(state, self.amplification, self.num_clients, now + 1)
        diagnostics = {
            "lr": self.eta(server_round),
            "control-norm": float(np.linalg.norm(state.c)),
            "amplified": int(closes or moved),
        }
        return Outcome(state, diagnostics, aggregated=bool(replies) or closes or moved)


class AmplifiedScaffold(VectorStrategy):
    """Amplified SCAFFOLD as a Flower Strategy over :class:`AmplifiedScaffoldCore`.

    ``evaluate_fn`` sees x only.
    """

    core_type = AmplifiedScaffoldCore
