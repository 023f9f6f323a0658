"""Debiasing FedAvg.

Z. Sun, Z. Zhang, Z. Xu, G. Joshi, P. Sharma, E. Wei, "Debiasing Federated Learning with
Correlated Client Participation", ICLR 2025 (arXiv:2410.01209).

Participation is an R-order Markov chain (a client waits at least R rounds between
participations; :mod:`fedram_flwr.availability.separation`), unknown to the server.
FedAvg then converges to the minimiser of sum_i pi_R^i f_i, biased unless pi_R, each
client's stationary probability of participating in a round, is uniform. Debiasing
FedAvg estimates pi_R^i online and reweights each participant's update by its inverse,

    pi_hat_i(t) = (rounds up to t in which i participated) / t,
    w_{t+1} = w_t - eta_g (1/N) sum_{i in S_t} (w_t - w_{t,K}^i) / pi_hat_i(t),

an unbiased estimate of the mean update over all N clients once pi_hat -> pi_R
(E[sum_{i in S} Delta_i / pi^i] = sum_i Delta_i). It is FedAvg-IS
(:class:`~fedram_flwr.strategies.participation.FedAvgISCore`) with the paper's empirical
frequency in place of CA-Fed's Beta(1, 1) posterior mean; the rest (the step, the
oracle-informed mode with the true pi_R, ``server_lr`` eta_g) is that core's.

The paper's condition: FedAvg's asymptotic bias vanishes exactly when pi_R is uniform
(its convergence result for Debiasing FedAvg excludes the cyclic case R = N/m - 1, i.e.
R = N - 1 with one client a round, where pi_R = m/N and FedAvg is already unbiased). It
reduces to FedAvg there: with
pi_hat_i = m / N for every participant (known, ``known_p``; or full participation, where
pi_hat = 1 from round 1) each of the m participants weighs 1 / m, the mean of their
models.

Choices (the algorithm box was not readable here; the abstract and reviews give the rule
"estimate pi_R^i online, reweight by 1 / pi_R^i"): the estimate counts round t itself,
so a participant's pi_hat is never 0 (its first round weighs t); no warm-up phase;
rounds in which nobody participated count in t; the reweighted sum is divided by N, as
FedAvg-IS does, and eta_g = 1 by default.

Flower's Message API: ``DebiasingFedAvg`` in :mod:`fedram_flwr.message_api` (same core,
same arguments).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedram_flwr.strategies.availability_estimates import pi_hat
from fedram_flwr.strategies.participation import FedAvgIS, FedAvgISCore


def participation_frequency(counts: np.ndarray, server_round: int) -> np.ndarray:
    """Return pi_hat_i(t) = (rounds 1..t in which client i participated) / t.

    The empirical frequency, i.e. :func:`pi_hat` without a prior.

    Parameters
    ----------
    counts : np.ndarray
        Each client's number of rounds it participated in, up to round t.
    server_round : int
        t, >= 1.

    Returns
    -------
    np.ndarray
        Each client's participation frequency, in [0, 1].
    """
    return pi_hat(counts, server_round, 0.0, 0.0)


@dataclass(frozen=True, eq=False, kw_only=True)
class DebiasingFedAvgCore(FedAvgISCore):
    """Debiasing FedAvg: FedAvg-IS whose estimate is :func:`participation_frequency`.

    Oracle-informed, ``known_p`` is pi_R.
    """

    def estimate(self, counts: np.ndarray, server_round: int) -> np.ndarray:
        """Estimate p_i by the empirical frequency (:func:`participation_frequency`)."""
        return participation_frequency(counts, server_round)


class DebiasingFedAvg(FedAvgIS):
    """Debiasing FedAvg over :class:`DebiasingFedAvgCore`."""

    core_type = DebiasingFedAvgCore
