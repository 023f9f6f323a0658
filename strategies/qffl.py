"""q-FFL: fair resource allocation in federated learning, through Flower's ``QFedAvg``.

T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated
Learning", ICLR 2020. q-FFL minimises sum_k p_k F_k^{q+1}(w) / (q + 1); its q-FedAvg
step (their Algorithm 3), with L = 1 / (client learning rate) and
Delta w_k = L (w_t - w_k) from each client's local SGD:

    Delta_k = F_k^q(w_t) Delta w_k,
    h_k = q F_k^{q-1}(w_t) ||Delta w_k||^2 + L F_k^q(w_t),
    w_{t+1} = w_t - sum_k Delta_k / sum_k h_k.

Flower's ``QFedAvg`` implements exactly this step (``aggregate_qffl``) but feeds it one
loss for every client: the server-side ``evaluate_fn`` loss of w_t. With the same F
for all k the F^q factors cancel up to the step size and nothing is re-weighted
towards the worse clients (and rounds where ``evaluate_fn`` returns None fail). ``QFFL``
keeps Flower's class (its constructor, ``configure_fit`` and ``pre_weights``) and its
``aggregate_qffl``; it only replaces the loss by each client's own loss at w_t,
reported as the fit metric ``received-loss`` (``CAFedClient``).

What that loss is, exactly: the mean cross-entropy (no weight-decay term) at w_t of
the *first mini-batch* of the client's local SGD in round t, i.e. of the first
min(B, n_k) examples of the round's permutation of its training set (drawn from
(seed, round, id); B = ``training.batch_size``, n_k its training examples), read from
that step's own forward pass. Li et al. (and their code) use F_k(w_t), the loss on the
client's whole training set before training. The two are the same when B >= n_k, as
in the shipped RC-FL scenarios (``batch_size: 8000``: one batch holds a client's
data, so docs/rc-fl.md's q-FFL rows are Li et al.'s rule). With B < n_k it is a
one-batch estimate of F_k(w_t): unbiased, but noisier, and F^q, F^(q-1) of it are
biased for q not in {0, 1}.

Flower's Message-API ``QFedAvg`` reads each client's own loss from its reply (no such
defect): ``QFFL`` in :mod:`fedram_flwr.message_api` is that class, with ``received-loss``
as its loss key, partition-id order and ``accept_failures``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import NDArrays, ndarrays_to_parameters
from flwr.server.strategy import QFedAvg
from flwr.server.strategy.aggregate import aggregate_qffl

from fedram_flwr.protocol import RECEIVED_LOSS, ClientReply
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.reply_aggregation import ReplyAggregation


def qffl_terms(
    w: list[np.ndarray], w_k: list[np.ndarray], loss: float, q: float, lr: float
) -> tuple[list[np.ndarray], float]:
    """Return (Delta_k, h_k) of q-FedAvg for one client (Li et al. 2020, Algorithm 3).

    ``QFedAvg``'s formulas, with L = 1 / lr and 1e-10 added to F as Flower does:
    Delta_k = F_k^q Delta w_k, h_k = q F_k^{q-1} ||Delta w_k||^2 + L F_k^q.

    Parameters
    ----------
    w : list of np.ndarray
        w_t, the model broadcast this round.
    w_k : list of np.ndarray
        The client's returned model.
    loss : float
        F_k(w_t), the client's loss at w_t, >= 0.
    q : float
        q-FFL's fairness parameter, >= 0 (0: FedAvg's mean).
    lr : float
        The clients' step size, > 0 (L = 1 / lr).

    Returns
    -------
    tuple of (list of np.ndarray, float)
        Delta_k, layer by layer, and h_k.
    """
    grads = [(a - b) / lr for a, b in zip(w, w_k, strict=True)]
    f = loss + 1e-10
    sq_norm = float(sum(np.sum(np.square(g)) for g in grads))
    return [f**q * g for g in grads], q * f ** (q - 1) * sq_norm + f**q / lr


@dataclass(frozen=True)
class QFFLStep(Core["NDArrays | None"]):
    """One q-FedAvg step as a core (Li et al. 2020, Algorithm 3).

    Its state is w_t, the model broadcast this round (Flower's ``pre_weights``). Built
    each round from Flower's ``QFedAvg`` arguments (``q_param``, ``qffl_learning_rate``).
    """

    q: float = hyper(doc="q (0: FedAvg's objective)", lo=0.0)
    lr: float = hyper(doc="the clients' step size; L = 1 / lr", lo=0.0, lo_open=True)

    def aggregate(
        self,
        state: NDArrays | None,
        server_round: int,
        replies: Sequence[ClientReply],
        elapsed: int,
    ) -> Outcome[NDArrays | None]:
        """Return w_{t+1} from each reply's model and ``received-loss`` (F_k(w_t))."""
        if not replies:
            return Outcome(state, {}, aggregated=False)
        if state is None:
            raise AttributeError("QFFL: pre_weights are None in aggregate_fit")
        terms = [
            qffl_terms(state, r.arrays(), r.metric(RECEIVED_LOSS), self.q, self.lr) for r in replies
        ]
        return Outcome(aggregate_qffl(state, [d for d, _ in terms], [h for _, h in terms]))


class QFFL(ReplyAggregation, QFedAvg):
    """q-FFL (Li et al., ICLR 2020): Flower's ``QFedAvg`` with each client's own loss.

    See the module docstring. The failure guard, the partition-id order (sums
    reproducible across engines) and the metrics are the shared ``ReplyAggregation``'s.
    Clients return their trained model and report ``partition-id`` and
    ``received-loss`` (their first mini-batch's loss at w_t: see the module docstring)
    in the fit metrics.

    Parameters
    ----------
    initial_arrays : NDArrays
        The initial model.
    **qfedavg_kwargs
        ``QFedAvg``'s arguments: ``q_param`` (q >= 0), ``qffl_learning_rate`` (the
        clients' step size, > 0) and FedAvg's keyword arguments.
    """

    def __init__(self, *, initial_arrays: NDArrays, **qfedavg_kwargs: Any) -> None:
        super().__init__(
            initial_parameters=ndarrays_to_parameters(initial_arrays), **qfedavg_kwargs
        )

    def round_core(self) -> tuple[QFFLStep, NDArrays | None]:
        """q-FedAvg's step with this strategy's q and L, from ``pre_weights`` (w_t)."""
        return QFFLStep(self.q_param, self.learning_rate), self.pre_weights

    def take_outcome(self, outcome: Outcome) -> NDArrays | None:
        """Return the new w_{t+1} (``None``: no step)."""
        return outcome.state if outcome.aggregated else None

    def diagnostics(self) -> dict[str, Any]:
        """Report nothing beyond Flower's own state."""
        return {}
