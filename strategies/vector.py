"""The global model as one float32 vector, for the cores that take the server step.

The base of the cores that take the server step themselves (FedAR, the stale-update and
participation baselines, SCAFFOLD).

Wire protocol: every client returns its *model* w_{t,K}^i (as the ERM client does for
FedAvg); the server forms the update against the model w_t it broadcast this round,
Delta_i = w_t - w_{t,K}^i. Subtracting on the server is the same float32 operation a
client would do, it keeps one client for FedAvg and every baseline, and a round's
updates all refer to the same w_t (Flower sends one model per round).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from fedram_flwr.protocol import LR, Arrays, ClientReply
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.core import Core
from fedram_flwr.strategies.hyper import hyper, num_clients_hyper

S = TypeVar("S")


# ------------------------------------------------------------------ pure functions
def flatten_into(arrays: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """Write the concatenated ``arrays`` into the float32 vector ``out`` (no copy made).

    Parameters
    ----------
    arrays : sequence of np.ndarray
        The model's layers, raveled in order.
    out : np.ndarray
        Shape (d,), d the layers' total size; cast ``same_kind``.

    Returns
    -------
    np.ndarray
        ``out``.
    """
    return np.concatenate([np.ravel(a) for a in arrays], out=out, casting="same_kind")


def unflatten(vector: np.ndarray, like: Sequence[np.ndarray]) -> Arrays:
    """Split ``vector`` into arrays with the shapes and dtypes of ``like``.

    Parameters
    ----------
    vector : np.ndarray
        Shape (d,), d the total size of ``like``.
    like : sequence of np.ndarray
        The model's layers, giving shapes and dtypes.

    Returns
    -------
    list of numpy.ndarray
        One new array per layer of ``like``.
    """
    sizes = np.cumsum([a.size for a in like])[:-1]
    return [part.reshape(a.shape).astype(a.dtype) for part, a in zip(np.split(vector, sizes), like)]


def step_size(lr: float, lr_decay: float, server_round: int) -> float:
    """Return eta_t = eta_0 * decay^(t - 1), the step size of round t.

    The clients' step size in round t, and FedAR's server step (eq. 7). FedAR Sec. 6.1
    gives only eta_0 = 0.1; decay 1 keeps it.

    Parameters
    ----------
    lr : float
        eta_0, the step size in round 1, > 0.
    lr_decay : float
        The per-round decay factor, in (0, 1].
    server_round : int
        t, >= 1.

    Returns
    -------
    float
        eta_t.
    """
    return lr * lr_decay ** (server_round - 1)


def client_models(
    replies: Sequence[ClientReply], like: np.ndarray
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield each reply's partition id and returned model w_{t,K}^i as a float32 vector.

    Parameters
    ----------
    replies : sequence of ClientReply
        The round's replies.
    like : np.ndarray
        Shape (d,), float32: the buffer's shape and dtype.

    Yields
    ------
    tuple of (int, np.ndarray)
        (i, w_{t,K}^i); the vector is one buffer, reused: valid until the next item.
    """
    buffer = np.empty_like(like)
    for reply in replies:
        flatten_into(reply.arrays(), buffer)
        yield reply.partition_id, buffer


# ------------------------------------------------------------------------ core
@dataclass(frozen=True, eq=False, kw_only=True)
class VectorCore(Core[S]):
    """The base of the vector cores: the model as one float32 vector.

    N = ``num_clients``, eta_t sent as the fit config's ``lr``; ``like`` (set by
    :meth:`for_model`) gives the model's shapes and dtypes.

    ``server_lr`` is the global learning rate eta_g, x_{t+1} = x_t + eta_g d_t with d_t
    the rule's own step: here a class attribute fixed at 1 (no server step size), a
    field (:func:`~fedram_flwr.strategies.hyper.server_lr_hyper`) in the cores that take
    one: MIFA, FedVARP, FedAvg-IS, FedAU (as the FedAU and FedAWE authors' code gives
    every baseline), FedAWE and SCAFFOLD.
    """

    num_clients: int = num_clients_hyper()
    lr: float = hyper(
        doc="eta_0, the clients' step size in round 1 (the server's in FedAR, MIFA, FedVARP)",
        lo=0.0,
        lo_open=True,
        run="training-lr",
    )
    lr_decay: float = hyper(
        1.0,
        doc="eta_t = eta_0 lr_decay^(t - 1); 1 keeps the step size",
        lo=0.0,
        hi=1.0,
        lo_open=True,
    )
    like: tuple[np.ndarray, ...] = field(default=(), repr=False)
    server_lr = 1.0  # not a field here (no annotation): see the docstring

    def for_model(self, initial_arrays: Sequence[np.ndarray]) -> VectorCore[S]:
        """Record the model's shapes and dtypes in ``like``."""
        return replace(self, like=tuple(np.asarray(a) for a in initial_arrays))

    def eta(self, server_round: int) -> float:
        """Return eta_t, the step size of round t (:func:`step_size`)."""
        return step_size(self.lr, self.lr_decay, server_round)

    def vector(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """Flatten ``arrays`` (the model's layers) into a new float32 vector."""
        return flatten_into(arrays, np.empty(sum(a.size for a in self.like), dtype=np.float32))

    def unflatten(self, vector: np.ndarray) -> Arrays:
        """Split a float32 vector into the model's arrays (:func:`unflatten`)."""
        return unflatten(vector, self.like)

    def fit_config(self, state: S, server_round: int) -> dict[str, Any]:
        """Send eta_t as the clients' ``lr``."""
        return {LR: self.eta(server_round)}


class VectorStrategy(CoreStrategy):
    """The Flower adapter of a :class:`VectorCore`.

    The core learns the model's shapes from ``initial_arrays``
    (:meth:`VectorCore.for_model`).
    """

    core_type: type[VectorCore]
