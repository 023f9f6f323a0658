"""FedBuff: federated learning with buffered asynchronous aggregation.

J. Nguyen, K. Malik, H. Zhan, A. Yousefpour, M. Rabbat, M. Malek, D. Huba, "Federated
Learning with Buffered Asynchronous Aggregation", AISTATS 2022 (arXiv 2106.06639),
Algorithm 1. About C clients train at any time, each on the model version it
downloaded; the server adds each arriving update, weighted by a function of its
staleness, to a buffer, and steps once K have arrived:

    Delta_k = w^{(v_k)} - y_k                   the client's update: the model it downloaded
                                                (version v_k) minus the model it returns
    s_k     = t - v_k                           staleness: server steps since the download
    B      <- B + s(s_k) Delta_k                (one update arrives)
    w^{t+1} = w^t - eta_g B / K                 (K have arrived; B <- 0, t <- t + 1)

Choices, and what the references do:

- **Delta and its sign** as FLSim's ``AsyncAggregationType.fed_buff_aggregation``
  (``flsim/optimizers/async_aggregators.py``): "delta = local_model_before_training -
  final_local_model", the server stepping ``global_model - lr * delta``.
- **Divide by K**, as the paper's Algorithm 1 averages the
  buffer before the server step (the paper is not in ``papers/``: not checked against its
  text here). FLSim's ``FedBuffAggregator._update_global_model`` sums instead
  (its reducer is ``ReductionType.WEIGHTED_SUM``, ``flsim/reducers/base_round_reducer.py``)
  and folds 1/K into its server lr (``test_sync_fedbuff_same_sgd`` in
  ``flsim/trainers/tests/test_fedbuff.py`` sets "fedbuff_global_lr = sync_global_lr /
  num_clients_sync"): FLSim's eta is this module's eta_g / K. Dividing by K, not by the
  sum of the weights, keeps a stale buffer's step smaller, which is what the
  down-weighting is for; with K = C = N equally fast clients and constant weights a step
  is FedAvg's round with the unweighted mean of the returned models and the server
  learning rate eta_g: w + eta_g (mean_k y_k - w) (tested).
- **Staleness weight** (:func:`staleness_weights`): ``polynomial`` 1 / (1 + s)^a with a =
  0.5 by default, 1 / sqrt(1 + s), the paper's experiments' choice; ``constant`` (1,
  FLSim's default ``ConstantStalenessWeight``) and
  ``hinge`` (FedAsync, Xie et al. 2019, arXiv 1903.03934, Sec. 5: 1 for s <= b, 1 / (a
  (s - b) + 1) beyond; FedAsync's a = 10, b = 4). FLSim's ``StalenessWeight.weight``
  (``flsim/utils/async_trainer/async_staleness_weights.py``) divides the raw weight by
  its value at ``avg_staleness`` (default 1), so its polynomial weight with exponent 0.5
  is sqrt(2) / sqrt(1 + s); the weights here are raw (1 at staleness 0), which a server
  learning rate scales equally.
- **Example weights**: none (FLSim's default ``EqualExampleWeight``); the paper's
  Algorithm 1 sums the updates unweighted.

The core (:class:`FedBuffCore`) is Flower-free: its state (:class:`FedBuffState`: the
model, its version, the weighted buffer and what it holds) is one explicit value, and
:meth:`FedBuffCore.receive` takes one update at a time. There is no round:
:meth:`FedBuffCore.aggregate` (the synchronous contract) refuses. The event loop that
keeps C clients training is :mod:`fedram_flwr.strategies.fedbuff_loop`; the Message-API
strategy (push and pull of messages, on the simulated clock or as replies arrive) is
:mod:`fedram_flwr.message_api.fedbuff` (docs/fedbuff.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import hyper, server_lr_hyper

__all__ = [
    "CLOCKS",
    "STALENESS_WEIGHTS",
    "FedBuffCore",
    "FedBuffState",
    "add_update",
    "buffered_step",
    "staleness_weights",
]

STALENESS_WEIGHTS = ("constant", "polynomial", "hinge")
"""The staleness functions s(tau) a scenario may name (:func:`staleness_weights`)."""
CLOCKS = ("auto", "simulated", "wall")
"""The orders in which the Message-API strategy takes arrivals (docs/fedbuff.md)."""


# ------------------------------------------------------------------ pure functions
def staleness_weights(
    kind: str,
    staleness: np.ndarray | Sequence[int] | int,
    *,
    exponent: float = 0.5,
    hinge_a: float = 10.0,
    hinge_b: float = 4.0,
) -> np.ndarray:
    """Weigh updates by their staleness.

    Parameters
    ----------
    kind : str
        ``constant``: 1; ``polynomial``: 1 / (1 + s)^exponent (the paper's experiments:
        exponent 0.5); ``hinge``: 1 for s <= hinge_b, 1 / (hinge_a (s - hinge_b) + 1)
        beyond (FedAsync, Xie et al. 2019, Sec. 5).
    staleness : array_like of int
        s, server steps since each update's model was downloaded, >= 0.
    exponent : float
        a of the polynomial, >= 0.
    hinge_a, hinge_b : float
        The hinge's slope and the staleness it starts at, >= 0.

    Returns
    -------
    np.ndarray
        One float64 weight per staleness, in (0, 1].

    Raises
    ------
    ValueError
        If a staleness is negative or ``kind`` is not one of :data:`STALENESS_WEIGHTS`.
    """
    s = np.asarray(staleness, dtype=np.float64)
    if np.any(s < 0):
        raise ValueError(f"staleness: {s.tolist()} holds a negative value")
    if kind == "constant":
        return np.ones_like(s)
    if kind == "polynomial":
        return 1.0 / (1.0 + s) ** exponent
    if kind == "hinge":
        return np.where(s <= hinge_b, 1.0, 1.0 / (hinge_a * (s - hinge_b) + 1.0))
    raise ValueError(f"staleness: {kind!r} is not one of {', '.join(STALENESS_WEIGHTS)}")


def add_update(
    buffer: Arrays | None,
    downloaded: Sequence[np.ndarray],
    returned: Sequence[np.ndarray],
    weight: float,
) -> Arrays:
    """Add one weighted update to the buffer: B + weight (downloaded - returned).

    Parameters
    ----------
    buffer : Arrays or None
        B, float64 layer by layer (``None``: empty, zeros).
    downloaded : sequence of np.ndarray
        w^{(v)}, the model the client started from.
    returned : sequence of np.ndarray
        y, the model it returned (same shapes).
    weight : float
        s(staleness).

    Returns
    -------
    Arrays
        The new buffer, float64 (a new list; ``buffer`` is not changed).
    """
    delta = [
        np.asarray(d, np.float64) - np.asarray(r, np.float64)
        for d, r in zip(downloaded, returned, strict=True)
    ]
    if buffer is None:
        return [weight * x for x in delta]
    return [b + weight * x for b, x in zip(buffer, delta, strict=True)]


def buffered_step(
    model: Sequence[np.ndarray], buffer: Sequence[np.ndarray], buffer_size: int, server_lr: float
) -> Arrays:
    """Take the server step w - eta_g B / K (Algorithm 1).

    Parameters
    ----------
    model : sequence of np.ndarray
        w^t, the current global model.
    buffer : sequence of np.ndarray
        B, the sum of the K weighted updates.
    buffer_size : int
        K, >= 1.
    server_lr : float
        eta_g, > 0.

    Returns
    -------
    Arrays
        w^{t+1}, computed in float64 and cast to each layer's dtype.
    """
    return [
        (np.asarray(w, np.float64) - server_lr * b / buffer_size).astype(np.asarray(w).dtype)
        for w, b in zip(model, buffer, strict=True)
    ]


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class FedBuffState:
    """The server's state between arrivals.

    Parameters
    ----------
    arrays : Arrays
        w^t, the global model clients download.
    version : int
        t, the server steps taken (the version a client downloading now gets).
    buffer : Arrays or None
        B, the weighted updates received since the last step (float64; ``None``: empty).
    staleness : tuple of int
        The staleness of each update in the buffer, in arrival order.
    weights : tuple of float
        Their weights s(staleness).
    clients : tuple of int
        Their partition ids.
    versions : tuple of int
        The model version each of them downloaded (its staleness: ``version`` minus it).
    """

    arrays: Arrays
    version: int = 0
    buffer: Arrays | None = None
    staleness: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    clients: tuple[int, ...] = ()
    versions: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        """k, the updates in the buffer."""
        return len(self.staleness)


@dataclass(frozen=True, kw_only=True)
class FedBuffCore(Core[FedBuffState]):
    """FedBuff's server (Nguyen et al., AISTATS 2022, Algorithm 1).

    :meth:`receive` takes one update; the K-th steps the model. ``concurrency`` is read
    by the event loop (:mod:`fedram_flwr.strategies.fedbuff_loop`) and ``clock`` by the
    Message-API strategy (:mod:`fedram_flwr.message_api.fedbuff`), not by the core.
    """

    buffer_size: int = hyper(10, doc="K, updates buffered per server step (Alg. 1)", lo=1)
    concurrency: int = hyper(
        10, doc="C, clients training at any time (Alg. 1)", lo=1, hi="num-clients"
    )
    staleness: str = hyper(
        "polynomial",
        doc="s(tau), the staleness weight: 1/(1+tau)^a, 1, or FedAsync's hinge",
        choices=STALENESS_WEIGHTS,
    )
    staleness_exponent: float = hyper(
        0.5, doc="a of the polynomial weight 1/(1+tau)^a (the paper: 0.5)", lo=0.0
    )
    hinge_a: float = hyper(10.0, doc="a, the hinge weight's slope (FedAsync)", lo=0.0)
    hinge_b: float = hyper(4.0, doc="b, the staleness the hinge starts at (FedAsync)", lo=0.0)
    server_lr: float = server_lr_hyper()
    clock: str = hyper(
        "auto",
        doc="order the Message-API strategy takes updates in: simulated (their finish times "
        "on the time model), wall (as replies arrive), auto (wall on the Deployment Engine)",
        choices=CLOCKS,
    )

    def init(self, initial_arrays: Sequence[np.ndarray]) -> FedBuffState:
        """Start at version 0 with an empty buffer."""
        return FedBuffState([np.array(a) for a in initial_arrays])

    def arrays(self, state: FedBuffState) -> Arrays:
        """Return the model a client downloads now (version ``state.version``)."""
        return state.arrays

    def weight(self, staleness: int) -> float:
        """Return s(staleness) with this core's function and parameters."""
        w = staleness_weights(
            self.staleness,
            staleness,
            exponent=self.staleness_exponent,
            hinge_a=self.hinge_a,
            hinge_b=self.hinge_b,
        )
        return float(w)

    def receive(
        self,
        state: FedBuffState,
        partition_id: int,
        downloaded: Sequence[np.ndarray],
        version: int,
        returned: Sequence[np.ndarray],
    ) -> tuple[FedBuffState, FedBuffState | None]:
        """Buffer one client's update; step the model when it is the K-th.

        Parameters
        ----------
        state : FedBuffState
            The server's state when the update arrives.
        partition_id : int
            The client's id (recorded).
        downloaded : sequence of np.ndarray
            The model it started from, version ``version``.
        version : int
            That model's version, <= ``state.version``.
        returned : sequence of np.ndarray
            The model it returned.

        Returns
        -------
        tuple of (FedBuffState, FedBuffState or None)
            The next state, and, when the server stepped (the next state's buffer is then
            empty and its version one higher), the full buffer it stepped with (its
            staleness, weights and clients, for the record); ``None`` otherwise.

        Raises
        ------
        ValueError
            If ``version`` is later than the server's.
        """
        staleness = state.version - version
        if staleness < 0:
            raise ValueError(f"version: {version} is later than the server's {state.version}")
        weight = self.weight(staleness)
        buffered = replace(
            state,
            buffer=add_update(state.buffer, downloaded, returned, weight),
            staleness=(*state.staleness, staleness),
            weights=(*state.weights, weight),
            clients=(*state.clients, partition_id),
            versions=(*state.versions, version),
        )
        if buffered.count < self.buffer_size:
            return buffered, None
        assert buffered.buffer is not None
        model = buffered_step(state.arrays, buffered.buffer, self.buffer_size, self.server_lr)
        return FedBuffState(model, state.version + 1), buffered

    def aggregate(
        self, state: FedBuffState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[FedBuffState]:
        """Refuse: FedBuff has no synchronous round (use :meth:`receive`).

        Raises
        ------
        NotImplementedError
            Always, naming the event loop to use.
        """
        raise NotImplementedError(
            "FedBuff is asynchronous: its updates arrive one at a time (FedBuffCore.receive, "
            "driven by fedram_flwr.strategies.fedbuff_loop), not in rounds"
        )

    def diagnostics(self, state: FedBuffState) -> dict[str, object]:
        """Return the version and the buffer's fill."""
        return {"version": state.version, "buffered": state.count}
