"""Every algorithm of :mod:`fedram_flwr.strategies` as a Flower Message-API strategy.

Each class is its legacy namesake's core (``fedram_flwr.strategies.<module>.<Name>Core``)
behind :class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`, with the legacy
class's hyper-parameters (same names, same defaults: they are the core's fields) and
Flower ``FedAvg``'s arguments. Same names as the legacy classes, as Flower does
(``flwr.server.strategy.FedAvg`` and ``flwr.serverapp.strategy.FedAvg``): switching API
changes the import, not the code. q-FFL is Flower's own Message-API ``QFedAvg``
(:class:`QFFL`). FedAWE and rFedFair, which address each node apart, are in
:mod:`~fedram_flwr.message_api.algorithms_per_node`, re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import QFedAvg

from fedram_flwr.message_api.algorithms_per_node import FEDAWE_HINT as FEDAWE_HINT
from fedram_flwr.message_api.algorithms_per_node import RFEDFAIR_HINT as RFEDFAIR_HINT
from fedram_flwr.message_api.algorithms_per_node import FedAWE as FedAWE
from fedram_flwr.message_api.algorithms_per_node import RFedFair as RFedFair
from fedram_flwr.message_api.round_guard import ordered_replies, take_replies
from fedram_flwr.message_api.strategy import CoreMessageStrategy
from fedram_flwr.protocol import RECEIVED_LOSS
from fedram_flwr.strategies.afl import AFLCore
from fedram_flwr.strategies.amplified_scaffold import AmplifiedScaffoldCore
from fedram_flwr.strategies.availability_baselines import (
    AdaFedCore,
    F3ASTCore,
    MoreAvailableCore,
    UnbiasedCore,
)
from fedram_flwr.strategies.ca_fed import CAFedCore
from fedram_flwr.strategies.debiasing_fedavg import DebiasingFedAvgCore
from fedram_flwr.strategies.fed_cvar_avg import FedCVaRAvgCore
from fedram_flwr.strategies.fedar import FedARCore
from fedram_flwr.strategies.fedau import FedAUCore
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.fedstale import FedStaleActiveCore, FedStaleCore
from fedram_flwr.strategies.focus import FocusCore
from fedram_flwr.strategies.participation import (
    FedAvgAllCore,
    FedAvgISCore,
    FedAvgSampledCore,
)
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds
from fedram_flwr.strategies.scaffold import ScaffoldCore
from fedram_flwr.strategies.stale_updates import FedVARPCore, MIFACore

THETA_T = "(theta, t): theta's arrays, then t as a 1-element array (protocol.join_theta_t)"


# ------------------------------------------------------------- FedAvg, Fed-CVaR-Avg
class FedAvg(CoreMessageStrategy):
    """FedAvg in partition-id order (replies without a partition id are summed first)."""

    core_type = FedAvgCore
    needs_partition_id = False


class FedCVaRAvg(CoreMessageStrategy):
    """Fed-CVaR-Avg (Alg. 1); ``evaluate_fn`` sees theta, its metrics gain the global ``t``."""

    core_type = FedCVaRAvgCore
    needs_partition_id = False
    reply_layout = THETA_T


# ------------------------------------------------------------- CA-Fed, baselines
class CAFed(CoreMessageStrategy):
    """CA-Fed (Alg. 1); replies report ``received-loss``."""

    core_type = CAFedCore
    required_metrics = (RECEIVED_LOSS,)


class Unbiased(CoreMessageStrategy):
    """Unbiased (CA-Fed Sec. V-A c, baseline 1)."""

    core_type = UnbiasedCore


class MoreAvailable(CoreMessageStrategy):
    """More available (CA-Fed Sec. V-A c, baseline 2)."""

    core_type = MoreAvailableCore


class AdaFed(CoreMessageStrategy):
    """AdaFed (CA-Fed Sec. V-A c, baseline 3)."""

    core_type = AdaFedCore


class F3AST(CoreMessageStrategy):
    """F3AST (Ribero et al. 2023; CA-Fed Sec. V-A c, baseline 4)."""

    core_type = F3ASTCore


# --------------------------------------------- FedAR and the stale-update family
class FedAR(CoreMessageStrategy):
    """FedAR (Alg. 1); steps from memory in a round without replies."""

    core_type = FedARCore


class MIFA(CoreMessageStrategy):
    """MIFA; steps from memory in an empty round."""

    core_type = MIFACore


class FedVARP(CoreMessageStrategy):
    """FedVARP (Jhunjhunwala et al. 2022, Alg. 1)."""

    core_type = FedVARPCore


class FedStale(CoreMessageStrategy):
    """FedStale (its authors' rule: fresh updates weighted a_i / p_i)."""

    core_type = FedStaleCore


class FedStaleActive(CoreMessageStrategy):
    """FedStale over the active set (fresh updates weighted 1 / |S|)."""

    core_type = FedStaleActiveCore


class FedAvgAll(CoreMessageStrategy):
    """FedAvg over all clients (the unavailable ones count as zero updates)."""

    core_type = FedAvgAllCore


class FedAvgIS(CoreMessageStrategy):
    """FedAvg-IS: each available client weighted 1 / p_i."""

    core_type = FedAvgISCore


class FedAvgSampled(CoreMessageStrategy):
    """FedAvg(S): at most S of the available clients a round.

    Under an availability wrapper the seeded subset of S is taken among the available
    nodes (in partition order) before training, as the legacy class does: only they
    train. Without one the server knows partition ids only from the replies, so the
    subset is taken among the replies (the same subset when every sampled node
    answers; the nodes left out train too and their update is discarded).
    """

    core_type = FedAvgSampledCore

    def pick(self, server_round: int, nodes: list[int], partitions: list[int]) -> list[int]:
        """Keep the seeded subset of at most S of the available ``nodes`` (the core's draw).

        See :meth:`CoreMessageStrategy.pick
        <fedram_flwr.message_api.strategy.CoreMessageStrategy.pick>`.
        """
        return [nodes[k] for k in self.core.select(len(nodes), server_round)]


class FedAU(CoreMessageStrategy):
    """FedAU (Wang and Ji, ICLR 2024): weights from the observed participation intervals."""

    core_type = FedAUCore


class Scaffold(CoreMessageStrategy):
    """SCAFFOLD (Alg. 1, option II); ``evaluate_fn`` sees x."""

    core_type = ScaffoldCore
    reply_layout = "(y_i, Delta c_i): the model's arrays, then the control's (join_model_control)"


class AmplifiedScaffold(CoreMessageStrategy):
    """Amplified SCAFFOLD (Crawshaw and Liu 2024); ``evaluate_fn`` sees x."""

    core_type = AmplifiedScaffoldCore
    reply_layout = "(y_i, D_i): the model's arrays, then the control's (join_model_control)"


class Focus(CoreMessageStrategy):
    """FOCUS (Ying, Li, Yang, NeurIPS 2025): the pushes y_i summed into y, x -= eta y."""

    core_type = FocusCore
    reply_layout = "y_i: the pushed gradient change, shaped like the model's arrays"


class DebiasingFedAvg(CoreMessageStrategy):
    """Debiasing FedAvg (Sun et al. 2025); pi_R known (``known_p``) or estimated."""

    core_type = DebiasingFedAvgCore


# ----------------------------------------------------------------------- AFL, q-FFL
class AFL(CoreMessageStrategy):
    """AFL (Mohri et al. 2019); replies report ``received-loss``."""

    core_type = AFLCore
    required_metrics = (RECEIVED_LOSS,)


class QFFL(QFedAvg):
    """q-FFL (Li et al., ICLR 2020) as Flower's Message-API ``QFedAvg``.

    Unchanged in its math (the q-FedAvg step, their Algorithm 3, with
    L = 1 / ``client_learning_rate``):

        Delta_k = F_k^q(w_t) L (w_t - w_k),
        h_k = q F_k^{q-1}(w_t) ||L (w_t - w_k)||^2 + L F_k^q(w_t),
        w_{t+1} = w_t - sum_k Delta_k / sum_k h_k.

    Flower's Message-API QFedAvg reads each client's own loss from its reply
    (``train_loss_key``), so the legacy ``QFedAvg``'s defect that
    :mod:`fedram_flwr.strategies.qffl` fixes (one server loss for every client) is not
    there. Added: ``train_loss_key`` defaults to ``received-loss``, replies are
    aggregated in partition-id order (sums reproducible across engines), replies with a
    bad or duplicated partition id or NaN / inf are refused, and the failure guard
    (:mod:`~fedram_flwr.message_api.round_guard`).

    Parameters
    ----------
    client_learning_rate : float
        The clients' learning rate, > 0; L = 1 / it.
    train_loss_key : str, default "received-loss"
        The reply metric holding F_k(w_t), the loss at the received model, as Li et al.
        (Flower's default ``train_loss`` would be a loss during training).
    accept_failures : bool, default True
        ``False``: a round with an error reply aggregates nothing and the model stays.
    max_failed_rounds : int, default 3
        Rounds in a row that aggregate nothing because clients failed before the run
        stops (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`), >= 1.
    **qfedavg_kwargs
        Flower Message-API ``QFedAvg``'s other arguments (``q``, q >= 0, default 0.1;
        ``fraction_train``, ``weighted_by_key``, ...).
    """

    def __init__(
        self,
        *,
        client_learning_rate: float,
        train_loss_key: str = RECEIVED_LOSS,
        accept_failures: bool = True,
        max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS,
        **qfedavg_kwargs: Any,
    ) -> None:
        super().__init__(
            client_learning_rate=client_learning_rate,
            train_loss_key=train_loss_key,
            **qfedavg_kwargs,
        )
        self.accept_failures = accept_failures
        self.failed_rounds = FailedRounds(max_failed_rounds)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen the replies and run Flower's q-FedAvg step on them, by partition id.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        replies : iterable of Message
            The round's replies, error replies included.

        Returns
        -------
        tuple of (ArrayRecord or None, MetricRecord or None)
            Flower's ``QFedAvg.aggregate_train`` result; ``(None, None)`` when a failure
            cancels the round (``accept_failures`` off).

        Raises
        ------
        ValueError
            For a reply without a partition id or ``train_loss_key``
            (:func:`~fedram_flwr.message_api.round_guard.ordered_replies`).
        FailedRoundsError
            After ``max_failed_rounds`` rounds in a row that aggregated nothing because
            clients failed.
        """
        replies = list(replies)
        errors = [m for m in replies if m.has_error()]
        taken, self.failed_rounds = take_replies(
            self.failed_rounds,
            type(self).__name__,
            server_round,
            [m for m in replies if not m.has_error()],
            errors,
            None,
            self.accept_failures,
        )
        if taken is None:
            return None, None
        pairs = ordered_replies(
            taken,
            type(self).__name__,
            weighted_by_key=self.weighted_by_key,
            required_metrics=(self.train_loss_key,),
        )
        return super().aggregate_train(server_round, [m for m, _ in pairs] + errors)
