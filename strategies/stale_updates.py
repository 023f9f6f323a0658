"""Stale-update memory and the baselines built on it: MIFA, FedVARP and FedStale.

- X. Gu, K. Huang, J. Zhang, L. Huang, "Fast Federated Learning in the Presence of
  Arbitrary Device Unavailability" (MIFA), NeurIPS 2021, Algorithm 1.
- D. Jhunjhunwala, P. Sharma, A. Nagarkatti, G. Joshi, "FedVARP: Tackling the Variance
  Due to Partial Client Participation in Federated Learning", UAI 2022, Algorithm 1.
- A. Rodio, G. Neglia, "FedStale: leveraging stale client updates in federated
  learning" (arXiv:2405.04171, 2024): a convex combination, weight beta, of FedVARP's
  direction and FedAvg's, both importance-weighted, as the authors implement it.

The server keeps every client's latest update G_i (FedAR eq. 4; MIFA's G_i, FedVARP's
y_i) in :class:`UpdateMemory`: one preallocated float32 (N x d) array whose rows are
overwritten in place, never copied, plus the running sum of its rows and the
inactivity counters tau (FedAR eq. 5). G_i = (w_t - w_{t,K}^i) / eta_t, so every
rule steps w_{t+1} = w_t - eta_g eta_t v_t with its own direction v_t (eta_g: the
global learning rate ``server_lr`` of MIFA and FedVARP, 1 by default and for FedAR and
FedStale; the FedAU and FedAWE authors' code gives both baselines one, applied to the
aggregated update eta_t v_t), y the memory before round t and S = A(t):

    MIFA:     v_t = (1/N) sum_i G_i                                      (all N clients)
    FedVARP:  v_t = (1/N) sum_i y_i + (1/|S|) sum_{i in S} (G_i - y_i)
    FedStale: v_t = beta (1/N) sum_i y_i + (1/N) sum_{i in S} (1/p_i) (G_i - beta y_i)
    FedStale over the active set (``fedstale-active``, this project's earlier rule):
              v_t = beta (1/N) sum_i y_i + (1/|S|) sum_{i in S} (G_i - beta y_i)

FedStale is the authors' rule (``arodio/FedStale``, ``utils/optim.py`` HistorySGD.step
with ``history_tracker.py`` HistoryTracker.average and ``aggregator.py``
CentralizedAggregator.mix under ``client_sampler.py`` UnbiasedClientsSampler): the
fresh updates are weighted by a_i / p_i (data share over participation probability;
a_i = 1/N here, as for FedAvg-IS and MIFA), so beta = 0 is FedAvg-IS (unbiased) and
beta = 1 is FedVARP with the same importance weights, while ``fedstale-active``'s
1/|S| makes beta = 0 FedAvg over the active clients and beta = 1 FedVARP as above.
The two agree only when every p_i = |S| / N.

A client never seen has G_i = 0 (MIFA's paper asks every client to answer in round 1;
here it simply contributes nothing until it does). FedAR (``fedar.py``) weighs the
same rows by eq. (6).

A round in which nobody is available (the engines' server hands it to the core with no
replies) still advances tau; MIFA (Alg. 1) and FedAR (eq. 7, Alg. 1 line 15) then step
along the stored updates, while FedVARP and FedStale keep the model, as FedVARP's
and FedStale's authors' code does (it skips a round without participants).

Flower's Message API: ``MIFA``, ``FedVARP``, ``FedStale``, ``FedStaleActive``
in :mod:`fedram_flwr.message_api` (same core, same arguments).

This module holds MIFA's and FedVARP's cores and adapters; the memory, its base core and
the two directions are in :mod:`~fedram_flwr.strategies.update_memory`, FedStale's two
variants in :mod:`~fedram_flwr.strategies.fedstale`; both are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedram_flwr.strategies.fedstale import FedStale as FedStale
from fedram_flwr.strategies.fedstale import FedStaleActive as FedStaleActive
from fedram_flwr.strategies.fedstale import FedStaleActiveCore as FedStaleActiveCore
from fedram_flwr.strategies.fedstale import FedStaleCore as FedStaleCore
from fedram_flwr.strategies.fedstale import FedStaleState as FedStaleState
from fedram_flwr.strategies.fedstale import fedstale_active_direction as fedstale_active_direction
from fedram_flwr.strategies.fedstale import fedstale_direction as fedstale_direction
from fedram_flwr.strategies.fedstale import stale_weight_hyper as stale_weight_hyper
from fedram_flwr.strategies.hyper import server_lr_hyper
from fedram_flwr.strategies.update_memory import MemoryCore, fedvarp_direction, mifa_direction
from fedram_flwr.strategies.update_memory import MemoryState as MemoryState
from fedram_flwr.strategies.update_memory import UpdateMemory as UpdateMemory
from fedram_flwr.strategies.update_memory import inactivity as inactivity
from fedram_flwr.strategies.vector import VectorStrategy


@dataclass(frozen=True, eq=False, kw_only=True)
class MIFACore(MemoryCore):
    """MIFA's core (Gu et al., NeurIPS 2021, Alg. 1).

    Equal weight 1/N to every client's latest update, from the running aggregate
    (updated by the changed rows only); ``server_lr``: eta_g.
    """

    server_lr: float = server_lr_hyper()

    def direction(self, server_round, memory, active, total_before):
        """Return the mean of every client's latest update (:func:`mifa_direction`)."""
        return mifa_direction(memory.total, self.num_clients), {}


@dataclass(frozen=True, eq=False, kw_only=True)
class FedVARPCore(MemoryCore):
    """FedVARP's core (Jhunjhunwala et al., UAI 2022, Alg. 1).

    Server learning rate ``server_lr``, eta_g, 1 by default: the memory mean corrected
    by the fresh updates of the available clients (|S| = |A(t)|); no step in a round
    without them (the authors' code skips it).
    """

    server_lr: float = server_lr_hyper()

    def direction(self, server_round, memory, active, total_before):
        """Return :func:`fedvarp_direction` (``None`` without participants)."""
        if not active:
            return None, {}
        v = fedvarp_direction(total_before, memory.total, self.num_clients, len(active))
        return v, {}


class MIFA(VectorStrategy):
    """MIFA (Gu et al., NeurIPS 2021) as a Flower Strategy over :class:`MIFACore`."""

    core_type = MIFACore


class FedVARP(VectorStrategy):
    """FedVARP (Jhunjhunwala et al., UAI 2022) as a Flower Strategy over :class:`FedVARPCore`."""

    core_type = FedVARPCore
