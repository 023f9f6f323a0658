"""FedAWE: adaptive innovation echoing and implicit gossiping.

M. Xiang, S. Ioannidis, E. Yeh, C. Joe-Wong, L. Su, "Efficient Federated Learning
against Heterogeneous and Non-stationary Client Unavailability", NeurIPS 2024,
Algorithm 1.

Algorithm 1, with the paper's rounds t = 0, 1, ... as this project's rounds t + 1 (so
the paper's tau_i(0) = -1 is ``tau = 0`` here and the echo factor t - tau_i(t) is the
same number):

- an available client starts its s local SGD steps from its own x_i^t (line 5), which is
  the global model x^{tau_i(t)+1} it was sent at the end of its last available round
  (lines 16-18, "implicit gossiping"), not the latest global model;
- its innovation G_i^t = x_i^t - x_i^{(t,s)} (line 10) is echoed:
  x_i^{t+} = x_i^t - eta_g (t - tau_i(t)) G_i^t (line 11), and tau_i(t+1) = t (line 12);
- x^{t+1} = (1/|A^t|) sum_{i in A^t} x_i^{t+} (line 15); unavailable clients keep x_i and
  tau_i (lines 19-21).

Where the state lives. Flower's server contacts a client only at the start of a round,
so it cannot multicast x^{t+1} at the end of round t (line 15-18) to the clients of
round t: the equivalent formulation here keeps each client's tau_i (O(1) per client) on
the server and sends client i, when it is next available, x^{tau_i+1}, the global model
right after its last available round. The server keeps those models once per distinct
tau_i among the clients (shared, dropped when no client refers to them): a handful when
every client returns within a few rounds, at most min(N, rounds) model copies. The
client does plain local SGD (``ERMClient``) and returns its model x_i^{(t,s)}; the echo
(line 11) is computed on the server from it, which is the same arithmetic. A round
nobody is available in leaves the model (|A^t| = 0: line 15 is undefined).

Flower's Message API: ``FedAWE`` in :mod:`fedram_flwr.message_api` (same core).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import FitIns, Parameters, ndarrays_to_parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.hyper import server_lr_hyper
from fedram_flwr.strategies.vector import VectorCore, VectorStrategy, client_models


# ------------------------------------------------------------------ pure functions
def echoed(start: np.ndarray, local: np.ndarray, factor: float, server_lr: float) -> np.ndarray:
    """Echo a client's innovation (FedAWE Alg. 1 lines 10-11).

    x_i^{t+} = x_i^t - eta_g (t - tau_i(t)) G_i^t with G_i^t = x_i^t - x_i^{(t,s)}.

    Parameters
    ----------
    start : np.ndarray
        x_i^t, shape (d,): the model the client started from.
    local : np.ndarray
        x_i^{(t,s)}, shape (d,): the model it returned after s local steps.
    factor : float
        The echo factor t - tau_i(t), >= 1 (rounds since its last available round).
    server_lr : float
        eta_g, the global learning rate, > 0.

    Returns
    -------
    np.ndarray
        x_i^{t+}, shape (d,), float64.
    """
    start64 = start.astype(np.float64)
    return start64 - server_lr * factor * (start64 - local)


def held_snapshots(snapshots: dict[int, np.ndarray], tau: np.ndarray) -> dict[int, np.ndarray]:
    """Keep the global models some client still starts from.

    Parameters
    ----------
    snapshots : dict of int to np.ndarray
        x^{tau+1} by tau (rounds).
    tau : np.ndarray
        Shape (N,): tau_i, each client's last available round (0: never).

    Returns
    -------
    dict of int to np.ndarray
        The entries of ``snapshots`` whose key is some tau_i.
    """
    return {k: v for k, v in snapshots.items() if k in set(tau.tolist())}


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class FedAWEState:
    """FedAWE's server state (Alg. 1).

    Parameters
    ----------
    w : np.ndarray
        x^t, shape (d,), float32: the global model.
    tau : np.ndarray
        Shape (N,), int: tau_i(t), each client's last available round (0: never
        available, the paper's -1).
    snapshots : dict of int to np.ndarray
        x^{tau+1} for each tau some client holds (``snapshots[0]`` = x^0).
    """

    w: np.ndarray
    tau: np.ndarray
    snapshots: dict[int, np.ndarray]


@dataclass(frozen=True, eq=False, kw_only=True)
class FedAWECore(VectorCore[FedAWEState]):
    """FedAWE's core (Xiang et al., NeurIPS 2024, Alg. 1).

    ``server_lr`` is eta_g; eta_l = ``lr`` (x ``lr_decay``^(t-1)) is sent to the
    clients as their step size.
    """

    late_updates = "as-sent"  # a busy client's tau_i, so the model it was sent, stays
    server_lr: float = server_lr_hyper()

    def init(self, initial_arrays: Sequence[np.ndarray]) -> FedAWEState:
        """Start from x^0, every tau_i = 0."""
        w = self.vector(initial_arrays)
        return FedAWEState(w, np.zeros(self.num_clients, dtype=np.int64), {0: w})

    def arrays(self, state: FedAWEState) -> Arrays:
        """Broadcast x^t (each client is sent its own x_i^t: :meth:`client_arrays`)."""
        return self.unflatten(state.w)

    def client_arrays(self, state: FedAWEState, partition_id: int) -> Arrays:
        """Return what client ``partition_id`` starts from: x_i^t = x^{tau_i+1} (lines 5, 18)."""
        return self.unflatten(state.snapshots[int(state.tau[partition_id])])

    def starts(
        self, state: FedAWEState, partition_ids: Sequence[int]
    ) -> tuple[list[int], dict[int, Arrays]]:
        """Return what the round's trainers ``partition_ids`` start from (lines 5, 18).

        Each distinct model once: (each trainer's key, its tau_i; key -> x^{tau+1}). Both
        Flower faces send trainer k the model ``models[keys[k]]``, serialised once.
        """
        keys = [int(state.tau[pid]) for pid in partition_ids]
        return keys, {k: self.unflatten(state.snapshots[k]) for k in dict.fromkeys(keys)}

    def aggregate(
        self, state: FedAWEState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[FedAWEState]:
        """Average the echoed models (lines 10-15) and record the clients' tau_i."""
        if not replies:
            return Outcome(state, {}, aggregated=False)
        acc = np.zeros(state.w.shape, dtype=np.float64)
        factors = []
        for i, local in client_models(replies, state.w):
            factors.append(server_round - int(state.tau[i]))
            acc += echoed(state.snapshots[int(state.tau[i])], local, factors[-1], self.server_lr)
        w = (acc / len(replies)).astype(np.float32)  # line 15
        tau = state.tau.copy()
        tau[[r.partition_id for r in replies]] = server_round  # line 12
        snapshots = held_snapshots({**state.snapshots, server_round: w}, tau)
        return Outcome(
            FedAWEState(w, tau, snapshots),
            {"lr": self.eta(server_round), "mean-echo": float(np.mean(factors))},
        )

    def diagnostics(self, state: FedAWEState) -> dict[str, Any]:
        """Log the number of models kept."""
        return {"snapshots": len(state.snapshots)}


# ---------------------------------------------------------------- Flower adapter
class FedAWE(VectorStrategy):
    """FedAWE (Xiang et al., NeurIPS 2024) as a Flower Strategy over :class:`FedAWECore`.

    Each sampled client is sent its own x_i^t (its partition id from the oracle's
    partition directory, else asked once with ``get_properties``:
    :meth:`~CoreStrategy.placements`).
    """

    core_type = FedAWECore

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Send each sampled client its own x_i^t (asking its partition id once)."""
        pairs = super().configure_fit(server_round, parameters, client_manager)
        placed = self.placements(client_manager, [proxy for proxy, _ in pairs])
        pids = [placed[proxy.cid].partition_id for proxy, _ in pairs]
        keys, models = self.core.starts(self.state, pids)
        sent = {key: ndarrays_to_parameters(model) for key, model in models.items()}
        return [(proxy, FitIns(sent[key], ins.config)) for (proxy, ins), key in zip(pairs, keys)]
