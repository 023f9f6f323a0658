"""The global model as one float32 vector: the base of the strategies that take the
server step themselves (FedAR and the stale-update and participation baselines).

Wire protocol: every client returns its *model* w_{t,K}^i (as the ERM client does for
FedAvg); the server forms the update against the model w_t it broadcast this round,
Delta_i = w_t - w_{t,K}^i. Subtracting on the server is the same float32 operation a
client would do, it keeps one client for FedAvg and every baseline, and a round's
updates all refer to the same w_t (Flower sends one model per round).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from flwr.common import (
    FitIns,
    FitRes,
    NDArrays,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.strategies.fedavg import FedAvg, client_id, in_partition_order


# ------------------------------------------------------------------ pure functions
def flatten_into(arrays: Sequence[np.ndarray], out: np.ndarray) -> np.ndarray:
    """Write the concatenated ``arrays`` into the float32 vector ``out`` (no copy made)."""
    return np.concatenate([np.ravel(a) for a in arrays], out=out, casting="same_kind")


def unflatten(vector: np.ndarray, like: Sequence[np.ndarray]) -> NDArrays:
    """Split ``vector`` into arrays with the shapes and dtypes of ``like``."""
    sizes = np.cumsum([a.size for a in like])[:-1]
    return [part.reshape(a.shape).astype(a.dtype) for part, a in zip(np.split(vector, sizes), like)]


def step_size(lr: float, lr_decay: float, server_round: int) -> float:
    """eta_t = eta_0 * decay^(t - 1): the clients' step size in round t, and FedAR's
    server step (eq. 7). FedAR Sec. 6.1 gives only eta_0 = 0.1; decay 1 keeps it."""
    return lr * lr_decay ** (server_round - 1)


class VectorStrategy(FedAvg):
    """Holds w_t as one float32 vector of the model's arrays, sends eta_t as the fit
    config's ``lr``, and replaces FedAvg's aggregation by :meth:`step`.

    ``num_clients`` is N (the memory strategies preallocate N rows). Results are taken
    in partition-id order. ``step`` also learns how many rounds passed since the last
    aggregation: Flower skips ``aggregate_fit`` when nobody is available, and the
    inactivity counters must still count that round.
    """

    def __init__(
        self,
        *,
        initial_arrays: NDArrays,
        num_clients: int,
        lr: float,
        lr_decay: float = 1.0,
        **fedavg_kwargs,
    ) -> None:
        if num_clients < 1:
            raise ValueError(f"num_clients: {num_clients} must be >= 1")
        if lr <= 0.0 or not 0.0 < lr_decay <= 1.0:
            raise ValueError(f"lr {lr} must be > 0 and lr_decay {lr_decay} in (0, 1]")
        super().__init__(initial_parameters=ndarrays_to_parameters(initial_arrays), **fedavg_kwargs)
        self.like = [np.asarray(a) for a in initial_arrays]
        self.w = np.empty(sum(a.size for a in self.like), dtype=np.float32)
        flatten_into(self.like, self.w)
        self.num_clients = num_clients
        self.lr, self.lr_decay = lr, lr_decay
        self.last_round = 0
        self._buffer = np.empty_like(self.w)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self.num_clients}, lr={self.lr}, decay={self.lr_decay})"

    @property
    def dim(self) -> int:
        return self.w.size

    def eta(self, server_round: int) -> float:
        return step_size(self.lr, self.lr_decay, server_round)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        pairs = super().configure_fit(server_round, parameters, client_manager)
        for _, ins in pairs:
            ins.config["lr"] = self.eta(server_round)
        return pairs

    def client_models(self, results: Sequence[FitRes]) -> Iterator[tuple[int, np.ndarray]]:
        """(partition id, w_{t,K}^i as a vector) per result; the vector is a reused
        buffer, valid until the next item."""
        for res in results:
            flatten_into(parameters_to_ndarrays(res.parameters), self._buffer)
            yield client_id(res), self._buffer

    def step(self, server_round: int, results: list[FitRes], elapsed: int) -> dict[str, Scalar]:
        """Set ``self.w`` from this round's ``results`` (partition order); return
        diagnostics for the round's metrics row."""
        raise NotImplementedError

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if failures and not self.accept_failures:
            return None, {}
        ordered = in_partition_order(results)
        elapsed, self.last_round = server_round - self.last_round, server_round
        diagnostics = self.step(server_round, ordered, elapsed)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn and ordered:
            metrics = self.fit_metrics_aggregation_fn(
                [(r.num_examples, r.metrics) for r in ordered]
            )
        return self.global_parameters(), {**metrics, **diagnostics}

    def global_parameters(self) -> Parameters:
        """The parameters Flower broadcasts next round."""
        return ndarrays_to_parameters(unflatten(self.w, self.like))
