"""FedAvg over the available clients with per-client aggregation weights.

The FedAR paper's FedAvg-IS and FedAvg(S=50) baselines (Sec. 6.1), FedAU, and the
FedAWE paper's FedAvg over all clients.

Every rule here is

    w_{t+1} = w_t - eta_g (1/N) sum_{i in A(t)} omega_i (w_t - w_{t,K}^i)

and they differ in omega_i. eta_g is the global learning rate (``server_lr``) of
FedAvg-IS, FedAU and FedAvg over all clients, 1 by default and for FedAvg(S): the
FedAU and FedAWE authors' code gives every baseline one, applied to the aggregated
update.

- FedAvg(S): at most S of the available clients, drawn uniformly, omega_i = N / |S_t|
  (the mean of their models, FedAR eq. 3 over S_t);
- FedAvg over all clients (Xiang et al., NeurIPS 2024, App. J.2: "counts the
  contributions of unavailable clients as 0's"): omega_i = 1, the sum of the available
  clients' updates divided by N;
- FedAvg-IS: omega_i = 1 / p_i, the inverse of client i's availability probability
  (Horvitz-Thompson: unbiased for the mean over all N clients). p_i is either the
  oracle's true value (oracle-informed, as FedAR's paper runs it; under a non-stationary
  law the current round's p_i^t: the FedAWE paper's "FedAvg with known p_i^t", Table 2,
  whose authors' code divides each active client's update by p_i^t and the sum by N,
  as here) or, by default, CA-Fed's
  online estimate (Sec. IV-B, :func:`~fedram_flwr.strategies.availability_estimates.pi_hat` with a
  Beta(1, 1) prior): p_hat_i = (rounds in which i was available up to t + 1) / (t + 2);
- FedAU: S. Wang, M. Ji, "A Lightweight Method for Tackling Unknown Participation
  Statistics in Federated Averaging", ICLR 2024 (arXiv:2306.03401), Algorithm 1 with
  its online weight estimation: omega_i is the mean of the participation intervals of
  client i observed *before* round t (an interval ends when i participates, or is cut
  at K rounds), and 1 until one has been observed. The authors' code (IBM/fedau) runs
  without a cut-off by default (K = infinity; here: any K >= the number of rounds) and
  has K = 50 as its second variant, the registry's default. The weights are computed
  on the server from the participations it observes (they depend on nothing else), and
  the global step size is eta_g (1 in the paper's experiments).

Flower's Message API: ``FedAvgIS``, ``FedAvgSampled``, ``FedAU``, ``FedAvgAll``
in :mod:`fedram_flwr.message_api` (same core, same arguments).

This module holds FedAvg(S), FedAvg over all clients and FedAvg-IS (and the oracle's
``known_p``); the step and the base core are in
:mod:`~fedram_flwr.strategies.reweighted`, FedAU in :mod:`~fedram_flwr.strategies.fedau`;
both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import FitIns, Parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.protocol import ClientReply
from fedram_flwr.rng import stream
from fedram_flwr.strategies.availability_estimates import pi_hat
from fedram_flwr.strategies.fedau import FedAU as FedAU
from fedram_flwr.strategies.fedau import FedAUCore as FedAUCore
from fedram_flwr.strategies.fedau import FedAUState as FedAUState
from fedram_flwr.strategies.fedau import fedau_round as fedau_round
from fedram_flwr.strategies.fedau import fedau_update as fedau_update
from fedram_flwr.strategies.fedau import fedau_weights as fedau_weights
from fedram_flwr.strategies.hyper import hyper, server_lr_hyper
from fedram_flwr.strategies.reweighted import ReweightedCore
from fedram_flwr.strategies.reweighted import ReweightedState as ReweightedState
from fedram_flwr.strategies.reweighted import reweighted_step as reweighted_step
from fedram_flwr.strategies.vector import VectorStrategy


# ------------------------------------------------------------------ pure functions
def subsample(num_available: int, max_clients: int, seed: int, server_round: int) -> np.ndarray:
    """Draw FedAvg(S)'s clients: at most S of the available ones, uniformly.

    Without replacement, from the ``fedavg-s-subsample`` stream seeded by (seed, round).

    Parameters
    ----------
    num_available : int
        |A(t)|, >= 0.
    max_clients : int
        S, >= 1.
    seed : int
        The scenario seed.
    server_round : int
        t, >= 1.

    Returns
    -------
    np.ndarray
        Sorted positions in 0..|A(t)|-1 (all of them when |A(t)| <= S).
    """
    if num_available <= max_clients:
        return np.arange(num_available)
    rng = stream("fedavg-s-subsample", seed, server_round)
    return np.sort(rng.choice(num_available, size=max_clients, replace=False))


KnownP = np.ndarray | Callable[[int], np.ndarray]


def known_p_hyper() -> Any:
    """Declare the oracle's p_i once for FedAvg-IS and FedStale (a :func:`hyper` field)."""
    return hyper(
        None,
        doc="p_i, the oracle's participation probabilities (oracle-informed: one per "
        "client or a function round -> p_i^t; None: estimated online)",
        run="known-p",
    )


def check_known_p(known_p: Sequence[float] | KnownP, num_clients: int) -> KnownP:
    """Check the oracle's p_i.

    Parameters
    ----------
    known_p : sequence of float or KnownP
        One p_i per client, or a function round -> p_i^t.
    num_clients : int
        N, >= 1.

    Returns
    -------
    KnownP
        The p_i as an array (each in (0, 1]), or the function as it is (checked in each
        round by :func:`known_probabilities`).

    Raises
    ------
    ValueError
        If the array does not hold N probabilities in (0, 1].
    """
    if callable(known_p):
        return known_p
    p = np.asarray(known_p, dtype=float)
    if p.shape != (num_clients,) or not np.all((p > 0) & (p <= 1)):  # NaN too
        raise ValueError(
            f"known_p: oracle-informed p: need {num_clients} probabilities in (0, 1], got {p}"
        )
    return p


def known_probabilities(
    known_p: KnownP, num_clients: int, server_round: int, active: list[int]
) -> np.ndarray:
    """Return p_i^t of the ``active`` clients in ``server_round``.

    Parameters
    ----------
    known_p : KnownP
        The checked p_i (:func:`check_known_p`): constant for a stationary law.
    num_clients : int
        N, >= 1.
    server_round : int
        t, >= 1.
    active : list of int
        Partition ids, in 0..N-1.

    Returns
    -------
    np.ndarray
        p_i^t, shape (len(active),), in (0, 1].

    Raises
    ------
    ValueError
        If the function's p^t is not N probabilities in [0, 1] (p_i^t may be 0: the
        interleaved sine's cut), or an active client has p_i^t = 0 (naming the client
        and the round).
    """
    if not callable(known_p):
        return known_p[active]
    p = np.asarray(known_p(server_round), dtype=float)
    if p.shape != (num_clients,) or not np.all((p >= 0) & (p <= 1)):  # NaN too
        raise ValueError(
            f"known_p: oracle-informed p in round {server_round}: need {num_clients} "
            f"probabilities in [0, 1], got {p}"
        )
    for i in active:
        if p[i] <= 0:
            raise ValueError(
                f"oracle-informed p: client {i} is active in round {server_round} with "
                f"p_i^t = {p[i]}; a client with p_i^t = 0 cannot be available"
            )
    return p[active]


# ------------------------------------------------------------------------ cores
@dataclass(frozen=True, eq=False, kw_only=True)
class FedAvgAllCore(ReweightedCore):
    """FedAvg over all clients' core (Xiang et al., NeurIPS 2024, App. J.2).

    omega_i = 1, so w_{t+1} = w_t - eta_g (1/N) sum_{i in A(t)} (w_t - w_{t,K}^i), the
    N - |A(t)| unavailable clients counted as zero updates; ``server_lr``: eta_g (the
    FedAWE paper tunes it for this baseline too, App. J Table 7).
    """

    server_lr: float = server_lr_hyper()

    def weights(self, estimator, server_round, active, elapsed):
        """Weigh every reply 1."""
        return np.ones(len(active)), estimator


@dataclass(frozen=True, eq=False, kw_only=True)
class FedAvgISCore(ReweightedCore):
    """FedAvg-IS's core (FedAR Sec. 6.1): omega_i = 1 / p_i.

    p_i is the oracle's ``known_p`` (oracle-informed) or, when it is ``None``, the
    estimate p_hat_i of round t, which counts round t itself
    (as CA-Fed's server does; rounds in which nobody was available count as rounds).
    The estimator state is each client's count of rounds available. ``server_lr``: eta_g.

    ``known_p`` is one p_i per client (a stationary law, each in (0, 1]) or a function
    server round -> p_i^t per client (a non-stationary one: FedAvg with known p_i^t,
    FedAWE Table 2), read in each round: p_i^t may be 0 (the interleaved sine's cut),
    but a client active with p_i^t = 0 is an error naming the client and the round.
    """

    known_p: KnownP | None = known_p_hyper()
    server_lr: float = server_lr_hyper()

    def __post_init__(self) -> None:
        """Check the hyper-parameters, and ``known_p`` against N."""
        super().__post_init__()
        if self.known_p is not None:
            object.__setattr__(self, "known_p", check_known_p(self.known_p, self.num_clients))

    def init_estimator(self) -> np.ndarray:
        """Return each client's count of rounds available: zeros."""
        return np.zeros(self.num_clients, dtype=np.int64)

    def known_at(self, server_round: int, active: list[int]) -> np.ndarray:
        """Return p_i^t of the ``active`` clients in round t (:func:`known_probabilities`)."""
        return known_probabilities(self.known_p, self.num_clients, server_round, active)

    def estimate(self, counts: np.ndarray, server_round: int) -> np.ndarray:
        """Estimate p_i of round t from the counts of rounds available up to t.

        CA-Fed's estimate with a Beta(1, 1) prior, (count + 1) / (t + 2).
        """
        return pi_hat(counts, server_round, 1.0, 1.0)

    def weights(self, estimator, server_round, active, elapsed):
        """Weigh each reply 1 / p_i (known) or 1 / p_hat_i (CA-Fed's estimate)."""
        counts = estimator.copy()
        counts[active] += 1
        if self.known_p is not None:
            return 1.0 / self.known_at(server_round, active), counts
        return 1.0 / self.estimate(counts, server_round)[active], counts


@dataclass(frozen=True, eq=False, kw_only=True)
class FedAvgSampledCore(ReweightedCore):
    """FedAvg(S)'s core (FedAR Sec. 6.1): at most S available clients a round.

    The mean model of at most ``max_clients`` available clients, drawn by
    :meth:`select` from (seed, round).
    """

    max_clients: int = hyper(50, doc="S, the most clients a round (FedAR Sec. 6.1: 50)", lo=1)
    seed: int = hyper(doc="the seed of the draws (with the round)", run="seed")

    def select(self, num_available: int, server_round: int) -> np.ndarray:
        """Return the positions of the available clients (in partition order) that train."""
        return subsample(num_available, self.max_clients, self.seed, server_round)

    def kept(self, server_round: int, replies: Sequence[ClientReply]) -> Sequence[int]:
        """Return the seeded subset (:meth:`select`) among the replies.

        Asked when the server could not choose before training (the Message API without
        an availability wrapper).
        """
        return self.select(len(replies), server_round)

    def weights(self, estimator, server_round, active, elapsed):
        """Weigh each reply N / |S_t| (the mean of the drawn clients' models)."""
        return np.full(len(active), self.num_clients / max(len(active), 1)), estimator


# --------------------------------------------------------------- Flower adapters
class FedAvgAll(VectorStrategy):
    """FedAvg over all clients (FedAWE paper, App. J.2) over :class:`FedAvgAllCore`."""

    core_type = FedAvgAllCore


class FedAvgIS(VectorStrategy):
    """FedAvg-IS (FedAR paper, Sec. 6.1) as a Flower Strategy over :class:`FedAvgISCore`."""

    core_type = FedAvgISCore


class FedAvgSampled(VectorStrategy):
    """FedAvg(S) (FedAR paper, Sec. 6.1) as a Flower Strategy over :class:`FedAvgSampledCore`."""

    core_type = FedAvgSampledCore

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Keep the core's seeded subset of the oracle's clients (in partition order)."""
        pairs = super().configure_fit(server_round, parameters, client_manager)
        return [pairs[k] for k in self.core.select(len(pairs), server_round)]
